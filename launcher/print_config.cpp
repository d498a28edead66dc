// --print-config: the effective job as YAML (see job_builder.h).
#include <yaml-cpp/yaml.h>

#include <charconv>

#include "fanout.h"
#include "job_builder.h"
#include "settings.h"

namespace ccrun::launcher {

std::string to_yaml(const JobSpec& s) {
  YAML::Emitter out;
  auto secs = [](std::chrono::milliseconds ms) { return seconds_text(ms); };
  out << YAML::BeginMap;
  // MIN:MAX quoted: a YAML 1.1 reader takes 1:4 unquoted as a base-60
  // number (64).
  out << YAML::Key << "nnodes" << YAML::Value;
  if (s.min_nodes == s.max_nodes) {
    out << s.min_nodes;
  } else {
    out << YAML::DoubleQuoted << std::to_string(s.min_nodes) + ":" + std::to_string(s.max_nodes);
  }
  out << YAML::Key << "nproc_per_node" << YAML::Value;
  if (!s.hosts.empty() && !s.nproc_per_node_given.empty()) {
    out << s.nproc_per_node_given;  // each host counts its own
  } else {
    out << s.nproc_per_node;
  }
  out << YAML::Key << "node_rank" << YAML::Value << s.node_rank;
  out << YAML::Key << "master_addr" << YAML::Value << s.master_addr;
  out << YAML::Key << "master_port" << YAML::Value << s.master_port;
  if (!s.local_addr.empty()) out << YAML::Key << "local_addr" << YAML::Value << s.local_addr;
  out << YAML::Key << "standalone" << YAML::Value << s.standalone;
  out << YAML::Key << "rdzv" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "backend" << YAML::Value << s.rdzv.backend;
  out << YAML::Key << "endpoint" << YAML::Value << s.rdzv.endpoint;
  out << YAML::Key << "id" << YAML::Value << s.rdzv.id;
  out << YAML::Key << "conf" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "join_timeout" << YAML::Value << secs(s.rdzv.join_timeout);
  out << YAML::Key << "last_call_timeout" << YAML::Value << secs(s.rdzv.last_call_timeout);
  out << YAML::Key << "close_timeout" << YAML::Value << secs(s.rdzv.close_timeout);
  out << YAML::Key << "read_timeout" << YAML::Value << secs(s.rdzv.read_timeout);
  out << YAML::Key << "keep_alive_interval" << YAML::Value << secs(s.rdzv.keep_alive_interval);
  out << YAML::Key << "keep_alive_max_attempt" << YAML::Value << s.rdzv.keep_alive_max_attempt;
  if (s.rdzv.is_host) out << YAML::Key << "is_host" << YAML::Value << *s.rdzv.is_host;
  out << YAML::EndMap << YAML::EndMap;
  out << YAML::Key << "max_restarts" << YAML::Value << s.max_restarts;
  out << YAML::Key << "monitor_interval" << YAML::Value << secs(s.monitor_interval);
  out << YAML::Key << "stop_grace" << YAML::Value << secs(s.stop_grace);
  out << YAML::Key << "hang_timeout" << YAML::Value << secs(s.hang_timeout);
  out << YAML::Key << "signals_to_handle" << YAML::Value << YAML::Flow << s.signals_to_handle;
  out << YAML::Key << "role" << YAML::Value << s.role;
  out << YAML::Key << "log_dir" << YAML::Value << s.logs.log_dir;
  out << YAML::Key << "redirects" << YAML::Value << YAML::DoubleQuoted
      << std_streams_text(s.logs.default_redirects, s.logs.redirects);
  out << YAML::Key << "tee" << YAML::Value << YAML::DoubleQuoted << std_streams_text(s.logs.default_tee, s.logs.tee);
  std::vector<int> filter(s.logs.local_ranks_filter.begin(), s.logs.local_ranks_filter.end());
  out << YAML::Key << "local_ranks_filter" << YAML::Value << YAML::Flow << filter;
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
    std::string ssh;
    for (const auto& w : s.fanout.ssh_command) {
      bool plain = !w.empty() && w.find_first_of(" \t\n'\"\\$`") == std::string::npos;
      ssh += (ssh.empty() ? "" : " ") + (plain ? w : shell_quote(w));
    }
    out << YAML::Key << "ssh_command" << YAML::Value << ssh;
    if (!s.fanout.remote_ccrun.empty()) out << YAML::Key << "remote_ccrun" << YAML::Value << s.fanout.remote_ccrun;
  }
  if (!s.fanout.exports.empty()) out << YAML::Key << "exports" << YAML::Value << YAML::Flow << s.fanout.exports;
  if (!s.env.empty()) {
    out << YAML::Key << "env" << YAML::Value << YAML::BeginMap;
    for (const auto& [k, v] : s.env) out << YAML::Key << k << YAML::Value << v;
    out << YAML::EndMap;
  }
  if (!s.entrypoint.empty()) {
    // The resolved command: no_python makes it load back unchanged.
    out << YAML::Key << "no_python" << YAML::Value << true;
    out << YAML::Key << "program" << YAML::Value << s.entrypoint[0];
    std::vector<std::string> args(s.entrypoint.begin() + 1, s.entrypoint.end());
    out << YAML::Key << "args" << YAML::Value << YAML::Flow << args;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace ccrun::launcher
