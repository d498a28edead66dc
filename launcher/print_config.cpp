// --print-config: the effective job as YAML (see job_builder.h), each
// setting written as the settings table (settings.h) reads it from the spec.
#include <yaml-cpp/yaml.h>

#include <sstream>

#include "resolve.h"
#include "job_builder.h"
#include "rdzv_conf.h"
#include "settings.h"

namespace ccrun::launcher {
namespace {

// A scalar as YAML reads it back: MIN:MAX quoted (a YAML 1.1 reader takes
// 1:4 unquoted as a base-60 number, 64), like anything else with a ':'.
void scalar(YAML::Emitter& out, const std::string& text, bool quoted) {
  if (quoted || text.find(':') != std::string::npos) out << YAML::DoubleQuoted;
  out << text;
}

// rdzv.conf's map: every typed key, then the keys kept as given (etcd_*,
// protocol, ...).
void rdzv_conf(YAML::Emitter& out, const RendezvousSpec& r) {
  out << YAML::BeginMap;
  for (const auto& k : rdzv_conf_keys()) {
    std::string text = k.text ? k.text(r) : "";
    if (!text.empty()) out << YAML::Key << k.name << YAML::Value << text;
  }
  for (const auto& [key, value] : r.conf) {
    const RdzvConfKey* known = find_rdzv_conf_key(key);
    if (!known || (!known->apply && !known->text)) out << YAML::Key << key << YAML::Value << value;
  }
  out << YAML::EndMap;
}

// One setting as its YamlForm says; `in_rdzv` tracks the open rdzv: map.
void setting(YAML::Emitter& out, const Setting& set, const JobSpec& s, bool& in_rdzv) {
  if (set.yaml == YamlForm::kNone) return;
  bool rdzv = set.yaml == YamlForm::kRdzv;
  if (in_rdzv && !rdzv) out << YAML::EndMap;
  if (rdzv && !in_rdzv) out << YAML::Key << "rdzv" << YAML::Value << YAML::BeginMap;
  in_rdzv = rdzv;
  // A switch printed says `on`, or is --standalone, which the spec keeps.
  bool on = set.on ? set.on(s) : s.standalone;
  std::string key = set.key, text = set.text ? set.text(s) : (on ? "true" : "false");
  if (set.yaml == YamlForm::kIfSet && text.empty()) return;
  if (rdzv) key = key.substr(std::string("rdzv_").size());
  out << YAML::Key << key << YAML::Value;
  if (key == "conf" && rdzv) return rdzv_conf(out, s.rdzv);
  if (set.yaml == YamlForm::kList) {
    std::vector<std::string> items;
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) items.push_back(item);
    out << YAML::Flow << items;
  } else {
    scalar(out, text, set.yaml == YamlForm::kQuoted);
  }
}

// The program as the user gave it (JobSpec::program), so that the file runs
// on another node the way it runs here, under that node's interpreter
// (PYTHON_EXEC): "program: train.py", with module, no_python or run_path
// when they were given. A spec that knows only its worker command (built
// from an entrypoint) is written as that command, run as it is (no_python).
void write_program(YAML::Emitter& out, const JobSpec& s) {
  const JobSpec::Program& p = s.program;
  if (p.name.empty()) {
    out << YAML::Key << "no_python" << YAML::Value << true;
    out << YAML::Key << "program" << YAML::Value << s.entrypoint.front();
    out << YAML::Key << "args" << YAML::Value << YAML::Flow
        << std::vector<std::string>(s.entrypoint.begin() + 1, s.entrypoint.end());
    return;
  }
  if (p.module) out << YAML::Key << "module" << YAML::Value << true;
  if (p.run_path) out << YAML::Key << "run_path" << YAML::Value << true;
  if (p.no_python) out << YAML::Key << "no_python" << YAML::Value << true;
  out << YAML::Key << "program" << YAML::Value << p.name;
  out << YAML::Key << "args" << YAML::Value << YAML::Flow << p.args;
}

}  // namespace

std::string to_yaml(const JobSpec& s) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  bool in_rdzv = false;
  for (const auto& set : settings()) setting(out, set, s, in_rdzv);
  if (in_rdzv) out << YAML::EndMap;
  if (!s.hosts.empty()) {
    // The hosts after --include/--exclude; an include reproduces the slots
    // that were narrowed.
    std::string include;
    bool narrowed = false;
    out << YAML::Key << "hosts" << YAML::Value << YAML::BeginSeq;
    for (const auto& h : s.hosts) {
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "host" << YAML::Value << h.name;
      if (h.slots > 0) out << YAML::Key << "slots" << YAML::Value << h.slots;
      out << YAML::EndMap;
      include += (include.empty() ? "" : "@") + h.name;
      if (int(h.devices.size()) != h.slots) {
        narrowed = true;
        for (size_t i = 0; i < h.devices.size(); ++i) {
          include += (i ? "," : ":") + std::to_string(h.devices[i]);
        }
      }
    }
    out << YAML::EndSeq;
    if (narrowed) out << YAML::Key << "include" << YAML::Value << include;
    out << YAML::Key << "ssh_command" << YAML::Value << find_setting("ssh_command")->text(s);
    if (!s.fanout.remote_ccrun.empty()) out << YAML::Key << "remote_ccrun" << YAML::Value << s.fanout.remote_ccrun;
  }
  if (!s.fanout.exports.empty()) out << YAML::Key << "exports" << YAML::Value << YAML::Flow << s.fanout.exports;
  if (!s.env.empty()) {
    out << YAML::Key << "env" << YAML::Value << YAML::BeginMap;
    for (const auto& [k, v] : s.env) out << YAML::Key << k << YAML::Value << v;
    out << YAML::EndMap;
  }
  if (!s.entrypoint.empty()) write_program(out, s);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace ccrun::launcher
