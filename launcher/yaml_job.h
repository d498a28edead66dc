//===- yaml_job.h - The YAML job file, read into raw settings ---*- C++ -*-===//
//
// `--config job.yaml` gives the same settings as the flags (see
// settings.h), under their YAML keys, plus what only a file can say: `env:`
// (extra worker variables), `program:` and `args:`. Values stay raw text
// labelled with their file and line; job_builder.cpp converts and validates
// them like flags.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hosts.h"
#include "settings.h"

namespace ccrun::launcher {

struct YamlJob {
  std::map<std::string, Raw> raws;            // by setting key ("rdzv_endpoint")
  std::map<std::string, std::string> env;     // env:
  std::optional<std::string> program;         // program:
  std::vector<std::string> args;              // args:
  std::map<std::string, Raw> rdzv_conf;       // rdzv: conf:
  std::optional<std::vector<HostLine>> hosts;  // hosts:
  std::string hosts_where;                     // "job.yaml:4: hosts"
  std::vector<std::string> exports;            // exports:
};

// Reads and checks the shape of `path`. Throws ConfigError naming the file,
// line and key.
YamlJob load_yaml(const std::string& path);

}  // namespace ccrun::launcher
