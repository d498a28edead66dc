// --numa-binding's choice of CPUs and memory nodes per worker, torch 2.x's
// rules as a pure function of the topology (see numa_plan.h).
#include "ccrun/numa_plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "ccrun/error.h"

namespace ccrun::agent {
namespace {

std::string mode_text(NumaBinding mode) { return "--numa-binding " + std::string(numa_binding_name(mode)); }

// The usable CPUs of NUMA node `node`, ascending.
std::vector<Cpu> node_cpus(const Topology& t, int node) {
  std::vector<Cpu> out;
  for (const Cpu& c : t.cpus) {
    if (c.numa == node) out.push_back(c);
  }
  return out;
}

// The GPUs on NUMA node `node`, ascending, and `gpu`'s place among them.
size_t place_on_node(const Topology& t, int node, int gpu, size_t& count) {
  size_t place = 0;
  count = 0;
  for (int g = 0; g < int(t.gpu_numa.size()); ++g) {
    if (t.gpu_numa[g] != node) continue;
    if (g < gpu) ++place;
    ++count;
  }
  return place;
}

std::vector<int> numbers(const std::vector<Cpu>& cpus) {
  std::vector<int> out;
  for (const Cpu& c : cpus) out.push_back(c.os_index);
  std::sort(out.begin(), out.end());
  return out;
}

// exclusive: the physical cores in order of their lowest CPU, split evenly.
std::vector<int> exclusive_share(const Topology& t, int node, int gpu, const std::vector<Cpu>& cpus) {
  std::map<int, std::vector<Cpu>> cores;
  for (const Cpu& c : cpus) cores[c.core].push_back(c);
  size_t gpus = 0;
  size_t place = place_on_node(t, node, gpu, gpus);
  size_t each = cores.size() / gpus, extra = cores.size() % gpus;
  if (each < 1) {
    throw Error("--numa-binding exclusive: there are only " + std::to_string(cores.size()) +
                " physical cores on NUMA node " + std::to_string(node) + ", but there are " +
                std::to_string(gpus) + " GPUs associated with this NUMA node; use "
                "--numa-binding node (the GPUs share the node's cores)");
  }
  size_t start = place * each + std::min(place, extra);
  size_t end = start + each + (place < extra ? 1 : 0);
  std::vector<Cpu> share;
  size_t i = 0;
  for (const auto& [core, members] : cores) {
    if (i >= start && i < end) share.insert(share.end(), members.begin(), members.end());
    ++i;
  }
  return numbers(share);
}

// core-complex: the L3 domains, most usable CPUs first, then lowest CPU.
std::vector<int> core_complex(const Topology& t, int node, int gpu, const std::vector<Cpu>& cpus) {
  std::map<int, std::vector<Cpu>> caches;
  for (const Cpu& c : cpus) caches[c.cache].push_back(c);
  std::vector<std::pair<int, std::vector<Cpu>>> order(caches.begin(), caches.end());
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second.size() > b.second.size();  // ties keep the lowest CPU first
  });
  size_t gpus = 0;
  size_t place = place_on_node(t, node, gpu, gpus);
  return numbers(order[place % order.size()].second);
}

}  // namespace

NumaPlan plan_numa_binding(const Topology& t, NumaBinding mode, int gpu) {
  if (gpu < 0 || gpu >= int(t.gpu_numa.size())) {
    throw Error(mode_text(mode) + ": local rank " + std::to_string(gpu) + " has no GPU: this node has " +
                std::to_string(t.gpu_numa.size()) +
                " GPU(s) (after CUDA_VISIBLE_DEVICES), and torch binds local rank N near GPU N; "
                "run at most one worker per GPU, or leave --numa-binding out");
  }
  int node = t.gpu_numa[gpu];
  std::vector<Cpu> cpus = node_cpus(t, node);
  if (cpus.empty()) {
    throw Error(mode_text(mode) + ": NUMA node " + std::to_string(node) + " of GPU " +
                std::to_string(gpu) + " has no CPU this agent may run on (its CPU affinity); "
                "widen the affinity ccrun starts with (taskset, the container's cpuset) or leave "
                "--numa-binding out");
  }
  NumaPlan plan;
  plan.mem_nodes = {node};
  switch (mode) {
    case NumaBinding::kNone:
      throw Error("plan_numa_binding: no mode");
    case NumaBinding::kNode:
      plan.cpus = numbers(cpus);
      break;
    case NumaBinding::kSocket: {
      // The socket of the node's lowest usable CPU, and every node in it.
      int package = cpus.front().package;
      std::set<int> nodes;
      std::vector<Cpu> in_socket;
      for (const Cpu& c : t.cpus) {
        if (c.package != package) continue;
        in_socket.push_back(c);
        nodes.insert(c.numa);
      }
      plan.cpus = numbers(in_socket);
      plan.mem_nodes.assign(nodes.begin(), nodes.end());
      break;
    }
    case NumaBinding::kExclusive:
      plan.cpus = exclusive_share(t, node, gpu, cpus);
      break;
    case NumaBinding::kCoreComplex:
      plan.cpus = core_complex(t, node, gpu, cpus);
      break;
  }
  return plan;
}

std::string ranges_text(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(v[i]);
    if (j > i) out += "-" + std::to_string(v[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace ccrun::agent
