// --numa-binding in the agent (agent_impl.h): each local rank's plan, made
// once per job from hwloc's view of the node (numa_topology.h, numa_plan.h),
// turned into the masks the worker's child applies before exec.
#include <spdlog/spdlog.h>

#include "agent_impl.h"
#include "ccrun/numa_topology.h"

namespace ccrun::agent {
namespace {

// `bits` (ascending, non-negative) as a kernel bit mask.
std::vector<unsigned long> bit_mask(const std::vector<int>& bits) {
  constexpr int kWord = int(sizeof(unsigned long) * 8);
  std::vector<unsigned long> mask(bits.empty() ? 0 : size_t(bits.back() / kWord + 1), 0);
  for (int b : bits) mask[size_t(b / kWord)] |= 1UL << (b % kWord);
  return mask;
}

}  // namespace

void Agent::plan_placements() {
  placements_.clear();
  if (spec_.numa_binding == NumaBinding::kNone) return;
  Topology topo = load_topology({});
  std::string mode(numa_binding_name(spec_.numa_binding));
  for (int lr = 0; lr < spec_.nproc_per_node; ++lr) {
    NumaPlan plan = plan_numa_binding(topo, spec_.numa_binding, lr);
    spdlog::info("ccrun: --numa-binding {}: local rank {} on CPUs {}, memory of NUMA node(s) {}",
                 mode, lr, ranges_text(plan.cpus), ranges_text(plan.mem_nodes));
    placements_.push_back({bit_mask(plan.cpus), bit_mask(plan.mem_nodes), int(plan.mem_nodes.size())});
  }
}

}  // namespace ccrun::agent
