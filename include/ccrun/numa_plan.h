//===- numa_plan.h - Which CPUs and memory a worker is bound to -*- C++ -*-===//
//
// --numa-binding as torch 2.x's torch/numa/binding.py decides it, as a pure
// function of the node's topology (numa_topology.h reads it with hwloc),
// the mode, and the GPU index (the worker's local rank: torch binds local
// rank N near GPU N). The agent plans every local rank once per job and
// each worker's child applies its plan with two system calls before exec
// (worker_group.cpp); unit tests drive it with hwloc's synthetic and XML
// topologies.
//
//   Topology t = load_topology({});                  // this machine
//   NumaPlan p = plan_numa_binding(t, NumaBinding::kExclusive, 3);
//   // p.cpus: rank 3's share of its GPU's NUMA node's cores; p.mem_nodes: {that node}
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

#include "ccrun/numa_binding.h"

namespace ccrun::agent {

// One logical CPU (hwloc's PU) the agent may run on.
struct Cpu {
  int os_index = 0;  // the kernel's CPU number
  int core = 0;      // its physical core, named by the core's lowest CPU number
  int cache = 0;     // its highest-level data cache (the L3 of a core complex),
                     // named by that cache's lowest CPU number
  int numa = 0;      // its NUMA node's number
  int package = 0;   // its socket's number
};

// What the planner needs of a node, in the kernel's numbering.
struct Topology {
  std::vector<Cpu> cpus;  // the CPUs the agent may use (its affinity), ascending
  std::vector<int> gpu_numa;  // the NUMA node of each GPU, by CUDA index
};

// Where one worker runs.
struct NumaPlan {
  std::vector<int> cpus;       // CPU numbers, ascending, never empty
  std::vector<int> mem_nodes;  // NUMA nodes its memory should come from, ascending
};

// The plan of the worker near GPU `gpu` (its local rank) under `mode` (not
// kNone), as torch decides it:
//   node:         every CPU of the GPU's NUMA node;
//   socket:       every CPU of the NUMA nodes in the socket of the GPU's node;
//   exclusive:    the node's physical cores split evenly among the node's GPUs
//                 in index order, the first GPUs taking one more when they do
//                 not divide; every CPU of a core goes with it;
//   core-complex: the node's L3 domains, most usable CPUs first (then lowest
//                 CPU), the node's i-th GPU taking domain i modulo their count.
// Throws ccrun::Error saying why and what to do when the GPU does not exist,
// its node has no CPU the agent may use, or (exclusive) it has fewer
// physical cores than GPUs.
[[nodiscard]] NumaPlan plan_numa_binding(const Topology& topo, NumaBinding mode, int gpu);

// "0-3,8,10-11": CPU or node numbers as the kernel's lists write them.
[[nodiscard]] std::string ranges_text(const std::vector<int>& sorted);

}  // namespace ccrun::agent
