// A process's environment while it is built (see env_builder.h).
#include "env_builder.h"

#include <cstring>

extern char** environ;

namespace ccrun::agent {

EnvBuilder EnvBuilder::from_environ() {
  EnvBuilder b;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) b.vars_.emplace(std::string(*e, size_t(eq - *e)), eq + 1);
  }
  return b;
}

void EnvBuilder::set_default(std::string_view name, std::string value) {
  if (!get(name)) set(name, std::move(value));
}

const std::string* EnvBuilder::get(std::string_view name) const {
  auto it = vars_.find(name);
  return it == vars_.end() ? nullptr : &it->second;
}

void EnvBuilder::erase(std::string_view name) {
  auto it = vars_.find(name);
  if (it != vars_.end()) vars_.erase(it);
}

void EnvBuilder::prepend_path(std::string_view name, const std::string& dir) {
  const std::string* old = get(name);
  set(name, old && !old->empty() ? dir + ":" + *old : dir);
}

std::vector<std::string> EnvBuilder::flatten() const {
  std::vector<std::string> out;
  out.reserve(vars_.size());
  for (const auto& [k, v] : vars_) out.push_back(k + "=" + v);
  return out;
}

}  // namespace ccrun::agent
