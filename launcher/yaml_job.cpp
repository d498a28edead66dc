// The YAML job file into raw settings (see yaml_job.h).
#include "yaml_job.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "ccrun/error.h"
#include "settings.h"

namespace ccrun::launcher {
namespace {

// Settings whose flag takes a comma-separated list: in the file they may
// also be a YAML list (as --print-config writes them).
bool is_list_setting(const std::string& key) {
  const Setting* s = find_setting(key);
  return s && s->yaml == YamlForm::kList;
}

// Reads one job file; every error names the file, the line and the key.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  // "job.yaml:7: key"
  std::string where(const YAML::Node& n, const std::string& key) const {
    return path_ + ":" + std::to_string(n.Mark().line + 1) + ": " + key;
  }

  // Calls `fn(key, key_node, value)` for each entry of the mapping `map`
  // (named `what` in errors), refusing non-scalar and duplicate keys.
  template <typename Fn>
  void for_each_key(const YAML::Node& map, const std::string& what, Fn&& fn) const {
    std::map<std::string, int> seen;  // key -> line
    for (const auto& kv : map) {
      if (!kv.first.IsScalar()) {
        throw ConfigError(where(kv.first, what) + ": a key must be a plain name, not a list or mapping");
      }
      std::string key = kv.first.Scalar();
      int line = kv.first.Mark().line + 1;
      if (auto [it, fresh] = seen.emplace(key, line); !fresh) {
        throw ConfigError(path_ + ":" + std::to_string(line) + ": " + what + key +
                          ": duplicate key (first on line " + std::to_string(it->second) +
                          "); keep one of them");
      }
      fn(key, kv.first, kv.second);
    }
  }

  // A plain value; a list only for a list setting (joined with commas).
  static std::string scalar_text(const YAML::Node& n, const std::string& where, bool list_ok) {
    if (n.IsScalar()) return n.Scalar();
    if (n.IsNull()) return "";
    if (n.IsSequence() && list_ok) {
      std::string out;
      for (const auto& item : n) {
        if (!item.IsScalar()) throw ConfigError(where + ": expected a list of plain values");
        out += (out.empty() ? "" : ",") + item.Scalar();
      }
      return out;
    }
    throw ConfigError(where + ": expected a single value, not a " +
                      (n.IsSequence() ? "list" : "mapping") +
                      (n.IsSequence() ? " (write the value without [ ])" : ""));
  }

  void read_rdzv(const YAML::Node& v, const std::string& at, YamlJob& job) const {
    if (!v.IsMap()) throw ConfigError(at + ": expected a mapping (backend, endpoint, id, conf)");
    for_each_key(v, "rdzv.", [&](const std::string& sub, const YAML::Node& k, const YAML::Node& val) {
      std::string sub_at = where(k, "rdzv." + sub);
      if (sub == "conf") {
        if (!val.IsMap()) throw ConfigError(sub_at + ": expected a mapping of settings");
        for_each_key(val, "rdzv.conf.", [&](const std::string& ck, const YAML::Node& ckn,
                                            const YAML::Node& cv) {
          std::string c_at = where(ckn, "rdzv.conf." + ck);
          job.rdzv_conf[ck] = Raw{scalar_text(cv, c_at, false), c_at, true};
        });
      } else if (sub == "backend" || sub == "endpoint" || sub == "id") {
        job.raws["rdzv_" + sub] = Raw{scalar_text(val, sub_at, false), sub_at, true};
      } else {
        throw ConfigError(sub_at + ": unknown key" + closest(sub, {"backend", "endpoint", "id", "conf"}) +
                          " (known: backend, endpoint, id, conf)");
      }
    });
  }

  void read_env(const YAML::Node& v, const std::string& at, YamlJob& job) const {
    if (!v.IsMap()) throw ConfigError(at + ": expected a mapping of NAME: value");
    for_each_key(v, "env.", [&](const std::string& name, const YAML::Node& k, const YAML::Node& val) {
      std::string e_at = where(k, "env." + name);
      if (name.empty()) throw ConfigError(where(k, "env") + ": an empty variable name; give NAME: value");
      if (name.find('=') != std::string::npos) {
        throw ConfigError(e_at + ": a variable name cannot hold '='; write NAME: value");
      }
      job.env[name] = scalar_text(val, e_at, false);
    });
  }

  // "job.yaml:7:5"
  std::string position(const YAML::Node& n) const {
    return path_ + ":" + std::to_string(n.Mark().line + 1) + ":" + std::to_string(n.Mark().column + 1);
  }

  // hosts: a list of `name` or {host: name, slots: N}.
  void read_hosts(const YAML::Node& v, const std::string& where_key, YamlJob& job) const {
    if (!v.IsSequence()) {
      throw ConfigError(where_key + ": expected a list of hosts (- node1, or - {host: node1, slots: 4})");
    }
    std::vector<HostLine> hosts;
    std::map<std::string, std::string> seen;
    for (const auto& item : v) {
      HostLine h;
      h.where = position(item);
      if (item.IsScalar()) {
        h.name = host_name(item.Scalar());
      } else if (item.IsMap()) {
        for_each_key(item, "hosts.", [&](const std::string& k, const YAML::Node& kn, const YAML::Node& val) {
          if (k == "host") {
            if (!val.IsScalar()) throw ConfigError(position(val) + ": host: expected a host name");
            h.name = host_name(val.Scalar());
          } else if (k == "slots") {
            Raw r{scalar_text(val, position(val) + ": slots", false), position(val) + ": slots", true};
            h.slots = int(to_int(r, 1, 1 << 16, "a positive number of slots"));
          } else {
            throw ConfigError(position(kn) + ": hosts: unknown key \"" + k + "\"" + closest(k, {"host", "slots"}) +
                              " (known: host, slots)");
          }
        });
        if (h.name.empty()) throw ConfigError(h.where + ": hosts: an entry needs host: NAME");
      } else {
        throw ConfigError(h.where + ": hosts: expected a host name or {host: NAME, slots: N}");
      }
      if (auto why = bad_host_name(h.name); !why.empty()) {
        throw ConfigError(h.where + ": hosts: \"" + h.name + "\": " + why);
      }
      if (auto [it, fresh] = seen.emplace(h.name, h.where); !fresh) {
        throw ConfigError(h.where + ": hosts: \"" + h.name + "\" is listed twice (first at " + it->second +
                          "); keep one entry per host");
      }
      hosts.push_back(std::move(h));
    }
    if (hosts.empty()) throw ConfigError(where_key + ": the list is empty; name at least one host");
    job.hosts = std::move(hosts);
    job.hosts_where = where_key;
  }

  YamlJob read() const {
    YAML::Node root = load();
    YamlJob job;
    if (root.IsNull()) return job;
    if (!root.IsMap()) throw ConfigError(path_ + ": the job file must be a mapping of keys");
    std::vector<std::string> known;
    for (const auto& s : settings()) {
      if (std::string(s.key).rfind("rdzv_", 0) != 0) known.push_back(s.key);
    }
    for (const char* k : {"rdzv", "env", "program", "args", "hosts", "exports"}) known.push_back(k);
    for_each_key(root, "", [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
      std::string at = where(k, key);
      if (key == "rdzv") {
        read_rdzv(v, at, job);
      } else if (key == "env") {
        read_env(v, at, job);
      } else if (key == "hosts") {
        read_hosts(v, at, job);
      } else if (key == "exports") {
        if (!v.IsSequence()) throw ConfigError(at + ": expected a list of variable names");
        for (const auto& e : v) {
          if (!e.IsScalar()) throw ConfigError(where(e, "exports") + ": expected a variable name");
          job.exports.push_back(e.Scalar());
        }
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
        job.raws[key] = Raw{scalar_text(v, at, is_list_setting(key)), at, true};
      } else if (find_setting(key)) {  // rdzv_backend: the flag's name
        std::string sub = key.substr(std::string("rdzv_").size());
        throw ConfigError(at + ": unknown key at the top; the rendezvous settings go under rdzv:, "
                          "write rdzv: {" + sub + ": ...}");
      } else {
        throw ConfigError(at + ": unknown key" + closest(key, known));
      }
    });
    return job;
  }

 private:
  YAML::Node load() const {
    std::error_code ec;
    if (std::filesystem::is_directory(path_, ec)) {
      throw ConfigError("--config \"" + path_ + "\": is a directory; give the job file (.yaml) in it");
    }
    std::ifstream in(path_);
    if (!in) throw ConfigError("--config \"" + path_ + "\": cannot read the file; check the path");
    try {
      return YAML::Load(in);
    } catch (const YAML::ParserException& e) {
      throw ConfigError(path_ + ":" + std::to_string(e.mark.line + 1) + ": not valid YAML: " + e.msg);
    } catch (const std::exception& e) {  // an I/O error while reading (a FIFO that fails, EIO)
      throw ConfigError("--config \"" + path_ + "\": cannot read the file: " + e.what());
    }
  }

  std::string path_;
};

}  // namespace

YamlJob load_yaml(const std::string& path) { return Reader(path).read(); }

}  // namespace ccrun::launcher
