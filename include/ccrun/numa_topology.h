//===- numa_topology.h - The node's CPUs and GPUs, read by hwloc -*- C++ -*-===//
//
// What --numa-binding's planner (numa_plan.h) needs to know of a node,
// read with hwloc (Debian's libhwloc) in the numa module (libccrun_numa.so,
// loaded by the first call: base/module_loader.h), so no sysfs parsing is
// written here and only jobs with --numa-binding load hwloc:
// every CPU with its core, highest cache, NUMA node and socket, and the NUMA
// node of each GPU. hwloc's own variables apply: HWLOC_XMLFILE=topo.xml or
// HWLOC_SYNTHETIC="pack:2 l3:2 core:4 pu:2" describe another machine (how
// the tests give a CPU-only machine GPUs).
//
// GPUs are the NVIDIA PCI display or 3D controllers (or, when there is
// none, AMD's), in PCI bus order: the order CUDA_DEVICE_ORDER=PCI_BUS_ID
// and nvidia-smi give, which is CUDA's own order on nodes of one GPU model.
// CUDA_VISIBLE_DEVICES, when set, picks and reorders them by index, as CUDA
// does.
//
//   Topology t = load_topology({});                        // this machine
//   TopologySource described;
//   described.xml_file = "gpus.xml";
//   Topology x = load_topology(described);                 // a described one
//
//===----------------------------------------------------------------------===//
#pragma once

#include <optional>
#include <set>
#include <string>

#include "ccrun/numa_plan.h"

namespace ccrun::agent {

struct TopologySource {
  std::string xml_file;   // hwloc XML (lstopo topo.xml) to read instead of this machine
  std::string synthetic;  // an hwloc synthetic description instead (no GPUs)
  // The CPUs the agent may use; nullopt = this process's affinity
  // (sched_getaffinity), as torch intersects with it.
  std::optional<std::set<int>> allowed;
  // CUDA_VISIBLE_DEVICES; nullopt = read it from the environment.
  std::optional<std::string> visible_devices;
};

// The topology; throws ccrun::Error saying why when hwloc cannot read it or
// CUDA_VISIBLE_DEVICES names a GPU that is not there (or by UUID, which
// PCI addresses cannot resolve).
[[nodiscard]] Topology load_topology(const TopologySource& source);

// The module's entry point (extern "C", found by name): *out = the topology.
using LoadTopology = void (*)(const TopologySource* source, Topology* out);
inline constexpr const char* kLoadTopologySymbol = "ccrun_numa_load_topology";

}  // namespace ccrun::agent
