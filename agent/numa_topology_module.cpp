// The numa module (libccrun_numa.so): the node's CPUs and GPUs for
// --numa-binding, read with hwloc (see numa_topology.h), so that only jobs
// with --numa-binding load hwloc and libudev (base/module_loader.h).
#include "ccrun/numa_topology.h"
#include "cuda_visible_devices.h"

#include <hwloc.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <tuple>

#include "ccrun/error.h"

namespace ccrun::agent {
namespace {

constexpr unsigned kNvidia = 0x10de, kAmd = 0x1002;

using TopologyPtr = std::unique_ptr<hwloc_topology, void (*)(hwloc_topology_t)>;

// hwloc's topology of `source`, IO devices (PCI) included.
TopologyPtr open_topology(const TopologySource& source) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw Error("hwloc: cannot initialise a topology");
  TopologyPtr topo(raw, hwloc_topology_destroy);
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (!source.xml_file.empty() && hwloc_topology_set_xml(raw, source.xml_file.c_str()) != 0) {
    throw Error("hwloc cannot read the topology file " + source.xml_file);
  }
  if (!source.synthetic.empty() && hwloc_topology_set_synthetic(raw, source.synthetic.c_str()) != 0) {
    throw Error("hwloc cannot read the synthetic topology \"" + source.synthetic + "\"");
  }
  if (hwloc_topology_load(raw) != 0) throw Error("hwloc cannot read this machine's topology");
  return topo;
}

// The lowest CPU number of `obj` (its name in torch's grouping).
int first_cpu(hwloc_obj_t obj) { return hwloc_bitmap_first(obj->cpuset); }

// The highest-level data or unified cache above `pu`, or nullptr.
hwloc_obj_t top_cache(hwloc_obj_t pu) {
  hwloc_obj_t best = nullptr;
  for (hwloc_obj_t o = pu->parent; o; o = o->parent) {
    bool data = o->type >= HWLOC_OBJ_L1CACHE && o->type <= HWLOC_OBJ_L5CACHE;
    if (data && (!best || o->attr->cache.depth > best->attr->cache.depth)) best = o;
  }
  return best;
}

Cpu describe(hwloc_topology_t topo, hwloc_obj_t pu) {
  Cpu c;
  c.os_index = int(pu->os_index);
  hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_CORE, pu);
  c.core = core ? first_cpu(core) : c.os_index;
  hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, pu);
  c.package = pkg ? int(pkg->os_index) : 0;
  int node = hwloc_bitmap_first(pu->nodeset);
  c.numa = node < 0 ? 0 : node;
  // No cache known: the NUMA node is one domain (its lowest CPU names it).
  hwloc_obj_t cache = top_cache(pu);
  c.cache = cache ? first_cpu(cache) : -1;
  return c;
}

std::set<int> own_affinity() {
  std::set<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &set)) out.insert(i);
  }
  return out;
}

std::vector<Cpu> read_cpus(hwloc_topology_t topo, const std::optional<std::set<int>>& allowed) {
  std::vector<Cpu> cpus;
  for (hwloc_obj_t pu = nullptr; (pu = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PU, pu));) {
    if (!allowed || allowed->count(int(pu->os_index))) cpus.push_back(describe(topo, pu));
  }
  std::map<int, int> node_first;  // cacheless CPUs: one domain per node
  for (const Cpu& c : cpus) node_first.emplace(c.numa, c.os_index);
  for (Cpu& c : cpus) {
    if (c.cache < 0) c.cache = node_first[c.numa];
  }
  std::sort(cpus.begin(), cpus.end(), [](const Cpu& a, const Cpu& b) { return a.os_index < b.os_index; });
  return cpus;
}

// The GPUs' NUMA nodes in PCI bus order: NVIDIA's, else AMD's.
std::vector<int> read_gpus(hwloc_topology_t topo) {
  using Addr = std::tuple<unsigned, unsigned, unsigned, unsigned>;
  std::map<Addr, int> nvidia, amd;
  for (hwloc_obj_t d = nullptr; (d = hwloc_get_next_pcidev(topo, d));) {
    const auto& p = d->attr->pcidev;
    unsigned base = p.class_id >> 8;  // 0x03: display; 0x12: processing accelerator
    hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(topo, d);
    // torch reads the device's numa_node; -1 (unknown, one node) means 0
    int node = near ? hwloc_bitmap_first(near->nodeset) : 0;
    Addr addr{p.domain, p.bus, p.dev, p.func};
    if (p.vendor_id == kNvidia && base == 0x03) nvidia[addr] = std::max(node, 0);
    if (p.vendor_id == kAmd && (base == 0x03 || base == 0x12)) amd[addr] = std::max(node, 0);
  }
  std::vector<int> out;
  for (const auto& [addr, node] : nvidia.empty() ? amd : nvidia) out.push_back(node);
  return out;
}

// `all` as CUDA_VISIBLE_DEVICES `visible` leaves it.
std::vector<int> visible_gpus(const std::vector<int>& all, const std::string& visible) {
  std::optional<std::vector<int>> indexes = cuda_device_indexes(visible);
  if (!indexes) {
    throw Error("--numa-binding: CUDA_VISIBLE_DEVICES=\"" + visible +
                "\" names a GPU other than by index; ccrun finds GPUs by PCI address, so name "
                "them by index (CUDA_VISIBLE_DEVICES=0,1)");
  }
  std::vector<int> out;
  for (int i : *indexes) {
    if (i >= int(all.size())) break;  // CUDA ignores the rest of the list
    out.push_back(all[size_t(i)]);
  }
  return out;
}

Topology read_topology(const TopologySource& source) {
  TopologyPtr topo = open_topology(source);
  // As torch: only the CPUs this process may use (a described machine too).
  std::optional<std::set<int>> allowed = source.allowed;
  if (!allowed) allowed = own_affinity();
  Topology t;
  t.cpus = read_cpus(topo.get(), allowed);
  t.gpu_numa = read_gpus(topo.get());
  std::optional<std::string> visible = source.visible_devices;
  if (!visible) {
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) visible = v;
  }
  if (visible) t.gpu_numa = visible_gpus(t.gpu_numa, *visible);
  return t;
}

}  // namespace
}  // namespace ccrun::agent

// The module's entry point (numa_topology.h, kLoadTopologySymbol).
extern "C" __attribute__((visibility("default"))) void ccrun_numa_load_topology(
    const ccrun::agent::TopologySource* source, ccrun::agent::Topology* out) {
  *out = ccrun::agent::read_topology(*source);
}
