//===- env_builder.h - A process's environment while it is built -*- C++ -*-===//
//
// A worker's environment has several authors: torchrun's variables and the
// job's own (worker_env.h), its progress record and the Python start-up
// hook's PYTHONPATH (progress_watch.h), torch's flight recorder
// (hang_evidence.h), the FileTimer, the agent's token. Each sets its own
// variables on one EnvBuilder; the process start flattens it once. A warm
// template starts from the same builder's node part (worker_env.h).
//
//   EnvBuilder env = EnvBuilder::from_environ();
//   env.set("RANK", "3");
//   env.prepend_path("PYTHONPATH", hook_dir);
//   spawn(argv, env.flatten());
//
//===----------------------------------------------------------------------===//
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ccrun::agent {

class EnvBuilder {
 public:
  // This process's own environment.
  static EnvBuilder from_environ();

  // NAME=value, replacing what was there.
  void set(std::string_view name, std::string value) { vars_[std::string(name)] = std::move(value); }
  // NAME=value unless NAME is set (torchrun's defaults: a user's value wins).
  void set_default(std::string_view name, std::string value);
  // The value of NAME, or null.
  const std::string* get(std::string_view name) const;
  void erase(std::string_view name);
  // NAME=dir:<its value>, or NAME=dir when it is unset or empty.
  void prepend_path(std::string_view name, const std::string& dir);

  // "NAME=value" for each variable, sorted by name: what exec takes.
  std::vector<std::string> flatten() const;

 private:
  std::map<std::string, std::string, std::less<>> vars_;
};

}  // namespace ccrun::agent
