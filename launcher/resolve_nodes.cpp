// Nodes: how many, how many workers each, and where node 0 is (see resolve.h).
#include <sched.h>

#include <algorithm>
#include <filesystem>

#include "resolve.h"

namespace ccrun::launcher {
namespace {

int count_gpus(const Environment& env) {
  if (auto v = env.get("CUDA_VISIBLE_DEVICES")) {
    if (v->empty() || *v == "-1") return 0;
    return int(std::count(v->begin(), v->end(), ',')) + 1;
  }
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev", ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("nvidia", 0) == 0 && name.size() > 6 &&
        std::all_of(name.begin() + 6, name.end(), ::isdigit)) {
      ++n;
    }
  }
  return n;
}

int count_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return 1;
}

}  // namespace

void resolve_nodes(const Sources& src, JobSpec& spec) {
  const Environment& env = src.env();
  auto raw = [&](const char* key) { return src.get(key); };
  Raw nnodes = raw("nnodes");
  if (auto colon = nnodes.value.find(':'); colon != std::string::npos) {
    Raw lo{nnodes.value.substr(0, colon), nnodes.where, nnodes.yaml};
    Raw hi{nnodes.value.substr(colon + 1), nnodes.where, nnodes.yaml};
    spec.min_nodes = int(to_int(lo, 1, 1 << 20, "MIN:MAX with positive integers"));
    spec.max_nodes = int(to_int(hi, 1, 1 << 20, "MIN:MAX with positive integers"));
    if (spec.min_nodes > spec.max_nodes) fail(nnodes, "min is larger than max");
  } else {
    spec.min_nodes = spec.max_nodes = int(to_int(nnodes, 1, 1 << 20, "a positive node count"));
  }
  Raw nproc = raw("nproc_per_node");
  if (nproc.value == "cpu") {
    spec.nproc_per_node = count_cpus();
    spec.nproc_per_node_given = nproc.value;
  } else if (nproc.value == "gpu" || nproc.value == "auto") {
    // "gpu" without a GPU here is 0: an error unless a host list's hosts
    // count their own (resolve_hosts decides).
    int gpus = count_gpus(env);
    spec.nproc_per_node = gpus > 0 ? gpus : nproc.value == "gpu" ? 0 : count_cpus();
    spec.nproc_per_node_given = nproc.value;
  } else {
    spec.nproc_per_node = int(to_int(nproc, 1, 1 << 16, "a positive number, auto, cpu or gpu"));
  }
  spec.node_rank = int(to_int(raw("node_rank"), 0, 1 << 20, "a node rank"));
  Raw master = raw("master_addr");
  if (master.value.empty()) fail(master, "empty; give node 0's address, e.g. 10.0.0.1");
  spec.master_addr = master.value;
  spec.master_port = int(to_int(raw("master_port"), 0, 65535, "a TCP port (0 = a free one)"));
  spec.local_addr = raw("local_addr").value;
  spec.standalone = to_bool(raw("standalone"));
}

void check_workers_counted(const Sources& src, const JobSpec& spec) {
  if (spec.hosts.empty() && spec.nproc_per_node == 0) {
    fail(src.get("nproc_per_node"), "no CUDA device is visible on this machine; give a number or use cpu");
  }
}

}  // namespace ccrun::launcher
