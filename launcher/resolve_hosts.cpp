// The host list: --hostfile or `hosts:`, narrowed by --include/--exclude
// (see resolve.h and hosts.h).
#include <algorithm>
#include <cctype>

#include <cstdio>
#include <filesystem>

#include "ccrun/error.h"
#include "ccrun/exclusion.h"
#include "ccrun/job_state.h"
#include "ccrun/rendezvous_backend.h"
#include "exclusion_file.h"
#include "fanout.h"
#include "hosts.h"
#include "resolve.h"

namespace ccrun::launcher {

void resolve_hosts(const Sources& src, JobSpec& spec) {
  const YamlJob& yaml = src.yaml();
  Raw hostfile = src.get("hostfile");
  Raw include = src.get("include"), exclude = src.get("exclude");
  std::vector<HostLine> lines;
  std::string list_where;
  if (!hostfile.value.empty() && hostfile.yaml && yaml.hosts) {
    throw ConfigError(hostfile.where + " and " + yaml.hosts_where +
                      ": give the hosts once, as a hostfile or as a list");
  }
  if (!hostfile.value.empty()) {  // a flag or PET_HOSTFILE wins over hosts:
    lines = read_hostfile(hostfile.value);
    list_where = hostfile.label();
  } else if (yaml.hosts) {
    lines = *yaml.hosts;
    list_where = yaml.hosts_where;
  }
  if (lines.empty()) {
    for (const Raw* f : {&include, &exclude}) {
      if (!f->value.empty()) fail(*f, "needs a host list (--hostfile FILE or hosts: in the job file)");
    }
    return;
  }
  // With auto, cpu or gpu, a host without slots= counts its own (slots 0).
  int default_slots = spec.nproc_per_node_given.empty() ? spec.nproc_per_node : 0;
  spec.hosts = resolve_host_list(lines, default_slots, include.value, include.label(),
                                 exclude.value, exclude.label());
  int n = int(spec.hosts.size());
  // A dynamic rendezvous runs at most MAX nodes; the hosts beyond wait as
  // hot spares (rendezvous/round_end.h).
  bool spares = dynamic_rendezvous(src) && n > spec.max_nodes;
  if (!src.given("nnodes")) {
    spec.min_nodes = spec.max_nodes = n;
  } else if (spec.max_nodes != n && !spares) {
    fail(src.get("nnodes"), "the host list (" + list_where + ") has " + std::to_string(n) +
                                " host(s) after --include/--exclude; give --nnodes " + std::to_string(n) +
                                " or MIN:" + std::to_string(n) + ", or drop --nnodes");
  }
  if (!src.given("master_addr")) spec.master_addr = spec.hosts.front().name;
}

bool dynamic_rendezvous(const Sources& src) {
  if (src.get("standalone").value == "true") return true;
  try {
    return rendezvous::parse_backend(src.get("rdzv_backend").value) != rendezvous::Backend::kStatic;
  } catch (const ConfigError&) {
    return false;  // resolve_rendezvous names the bad value
  }
}

void skip_excluded_hosts(const Sources& src, JobSpec& spec) {
  if (spec.hosts.empty()) return;
  std::filesystem::path file = exclusion_file(src.env(), spec.rdzv.id);
  ExclusionList list = read_exclusion_file(file);
  int64_t now = wall_clock_ms();
  std::vector<HostSpec> kept;
  std::string skipped;
  for (const auto& h : spec.hosts) {
    auto e = list.active(h.name, now);
    if (!e) {
      kept.push_back(h);
      continue;
    }
    std::fprintf(stderr, "ccrun: leaving out host %s: excluded %s (%s; delete it to forget)\n",
                 h.name.c_str(), describe(*e, now).c_str(), file.c_str());
    skipped += (skipped.empty() ? "" : ", ") + h.name;
  }
  if (skipped.empty()) return;
  int n = int(kept.size());
  bool dynamic = spec.rdzv.backend != rendezvous::Backend::kStatic;
  if (!dynamic || n < spec.min_nodes) {
    std::string need = dynamic ? "at least " + std::to_string(spec.min_nodes) + " (--nnodes' minimum)"
                               : "all " + std::to_string(spec.max_nodes) + " (a static job)";
    throw ConfigError("the host list leaves " + std::to_string(n) + " host(s) once " + skipped +
                      " (excluded, above) are left out; the job needs " + need +
                      ": add hosts, make the job elastic (--rdzv-backend c10d --nnodes MIN:MAX), "
                      "wait for the cool-down, or delete " + file.string() + " to forget");
  }
  if (!src.given("master_addr") && spec.master_addr == spec.hosts.front().name) {
    spec.master_addr = kept.front().name;
  }
  spec.hosts = std::move(kept);
}

void resolve_fanout(const Sources& src, const std::vector<std::string>& flag_exports, JobSpec& spec) {
  Raw ssh = src.get("ssh_command");
  auto ccrun_ssh = src.env().get("CCRUN_SSH");
  if (ccrun_ssh && (ssh.yaml || ssh.where.ends_with("(default)"))) ssh = Raw{*ccrun_ssh, "CCRUN_SSH", false};
  spec.fanout.ssh_command = split_words(ssh.value, ssh.label());
  spec.fanout.remote_ccrun = src.get("remote_ccrun").value;
  std::vector<std::pair<std::string, std::string>> named;  // name, where
  for (const auto& e : src.yaml().exports) named.emplace_back(e, "exports: \"" + e + "\"");
  for (const auto& e : flag_exports) named.emplace_back(e, "--export \"" + e + "\"");
  for (const auto& [name, where] : named) {
    bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
    for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!ok) throw ConfigError(where + ": expected a variable name (letters, digits, _)");
    if (std::find(spec.fanout.exports.begin(), spec.fanout.exports.end(), name) == spec.fanout.exports.end()) {
      spec.fanout.exports.push_back(name);
    }
  }
  if (spec.hosts.empty() && !flag_exports.empty()) {
    throw ConfigError("--export forwards variables to the hosts of a host list; give --hostfile too");
  }
}

}  // namespace ccrun::launcher
