// The YAML job file into raw settings (see yaml_job.h).
#include "yaml_job.h"

#include <yaml-cpp/yaml.h>

#include "ccrun/error.h"

namespace ccrun::launcher {
namespace {

std::string scalar_text(const YAML::Node& n, const std::string& where) {
  if (n.IsScalar()) return n.Scalar();
  if (n.IsNull()) return "";
  if (n.IsSequence()) {  // lists of ranks or signals are given comma-separated on flags
    std::string out;
    for (const auto& item : n) {
      if (!item.IsScalar()) throw ConfigError(where + ": expected a list of plain values");
      out += (out.empty() ? "" : ",") + item.Scalar();
    }
    return out;
  }
  throw ConfigError(where + ": expected a plain value, not a mapping");
}

}  // namespace

YamlJob load_yaml(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw ConfigError("--config \"" + path + "\": cannot read the file; check the path");
  } catch (const YAML::ParserException& e) {
    throw ConfigError(path + ":" + std::to_string(e.mark.line + 1) + ": not valid YAML: " + e.msg);
  }
  YamlJob job;
  if (root.IsNull()) return job;
  if (!root.IsMap()) throw ConfigError(path + ": the job file must be a mapping of keys");
  std::vector<std::string> known;
  for (const auto& s : settings()) {
    if (std::string(s.key).rfind("rdzv_", 0) != 0) known.push_back(s.key);
  }
  for (const char* k : {"rdzv", "env", "program", "args"}) known.push_back(k);
  auto where = [&](const YAML::Node& n, const std::string& key) {
    return path + ":" + std::to_string(n.Mark().line + 1) + ": " + key;
  };
  for (const auto& kv : root) {
    std::string key = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    std::string at = where(kv.first, key);
    if (key == "rdzv") {
      if (!v.IsMap()) throw ConfigError(at + ": expected a mapping (backend, endpoint, id, conf)");
      for (const auto& r : v) {
        std::string sub = r.first.Scalar();
        std::string sub_at = where(r.first, "rdzv." + sub);
        if (sub == "conf") {
          if (!r.second.IsMap()) throw ConfigError(sub_at + ": expected a mapping of settings");
          for (const auto& c : r.second) {
            std::string ck = c.first.Scalar();
            job.rdzv_conf[ck] = Raw{scalar_text(c.second, where(c.first, "rdzv.conf." + ck)),
                                    where(c.first, "rdzv.conf." + ck), true};
          }
        } else if (sub == "backend" || sub == "endpoint" || sub == "id") {
          job.raws["rdzv_" + sub] = Raw{scalar_text(r.second, sub_at), sub_at, true};
        } else {
          throw ConfigError(sub_at + ": unknown key" +
                            closest(sub, {"backend", "endpoint", "id", "conf"}) +
                            " (known: backend, endpoint, id, conf)");
        }
      }
    } else if (key == "env") {
      if (!v.IsMap()) throw ConfigError(at + ": expected a mapping of NAME: value");
      for (const auto& e : v) job.env[e.first.Scalar()] = scalar_text(e.second, where(e.first, "env"));
    } else if (key == "program") {
      if (!v.IsScalar()) throw ConfigError(at + ": expected a path or module name");
      job.program = v.Scalar();
    } else if (key == "args") {
      if (!v.IsSequence()) throw ConfigError(at + ": expected a list of arguments");
      for (const auto& a : v) {
        if (!a.IsScalar()) throw ConfigError(where(a, "args") + ": expected a plain argument");
        job.args.push_back(a.Scalar());
      }
    } else if (find_setting(key) && key.rfind("rdzv_", 0) != 0) {
      job.raws[key] = Raw{scalar_text(v, at), at, true};
    } else {
      throw ConfigError(at + ": unknown key" + closest(key, known));
    }
  }
  return job;
}

}  // namespace ccrun::launcher
