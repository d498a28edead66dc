// --numa-binding's planner (ccrun/numa_plan.h) on hwloc's synthetic and XML
// topologies (ccrun/numa_topology.h), checked against torch 2.x's rules.
#include "ccrun/numa_plan.h"

#include <catch2/catch.hpp>

#include "ccrun/error.h"
#include "ccrun/numa_topology.h"

using namespace ccrun;
using namespace ccrun::agent;

namespace {

const std::string kData = std::string(CCRUN_SOURCE_DIR) + "/tests/agent/data/";

std::set<int> all_cpus(int n) {
  std::set<int> s;
  for (int i = 0; i < n; ++i) s.insert(i);
  return s;
}

// The XML machine: 2 sockets, each 1 NUMA node, 2 L3s of 2 cores of 2 PUs;
// GPUs 0 and 1 (PCI 17, 18) on node 0, GPU 2 (PCI 85) on node 1; an ASPEED
// VGA on node 0 that is no GPU.
Topology two_sockets(const std::string& visible) {
  TopologySource src;
  src.xml_file = kData + "two_sockets_3_gpus.xml";
  src.allowed = all_cpus(16);
  src.visible_devices = visible;
  return load_topology(src);
}

Topology two_sockets_all() { return two_sockets("0,1,2"); }

std::vector<int> range(int a, int b) {
  std::vector<int> v;
  for (int i = a; i <= b; ++i) v.push_back(i);
  return v;
}

}  // namespace

TEST_CASE("the XML topology's GPUs are NVIDIA's, in PCI order, on their NUMA nodes") {
  Topology t = two_sockets_all();
  REQUIRE(t.cpus.size() == 16);
  CHECK(t.gpu_numa == std::vector<int>{0, 0, 1});
  CHECK(t.cpus[5].core == 4);
  CHECK(t.cpus[5].cache == 4);
  CHECK(t.cpus[9].package == 1);
  CHECK(t.cpus[9].numa == 1);
  // CUDA_VISIBLE_DEVICES picks and reorders by index; an index past the
  // GPUs ends the list, as CUDA reads it; a UUID is refused with the fix.
  CHECK(two_sockets("2,0").gpu_numa == std::vector<int>{1, 0});
  CHECK(two_sockets("1,7,0").gpu_numa == std::vector<int>{0});
  CHECK(two_sockets("").gpu_numa.empty());
  CHECK_THROWS_WITH(two_sockets("GPU-5f1c"), Catch::Contains("by index"));
}

TEST_CASE("node: every CPU of the GPU's NUMA node, memory from it") {
  Topology t = two_sockets_all();
  NumaPlan p = plan_numa_binding(t, NumaBinding::kNode, 1);
  CHECK(p.cpus == range(0, 7));
  CHECK(p.mem_nodes == std::vector<int>{0});
  CHECK(plan_numa_binding(t, NumaBinding::kNode, 2).cpus == range(8, 15));
  CHECK(ranges_text(plan_numa_binding(t, NumaBinding::kNode, 2).cpus) == "8-15");
}

TEST_CASE("exclusive: the node's physical cores split among its GPUs, hyperthreads together") {
  Topology t = two_sockets_all();
  // node 0: 4 cores, GPUs 0 and 1 -> 2 cores (4 PUs) each; node 1: GPU 2 alone
  CHECK(plan_numa_binding(t, NumaBinding::kExclusive, 0).cpus == range(0, 3));
  CHECK(plan_numa_binding(t, NumaBinding::kExclusive, 1).cpus == range(4, 7));
  CHECK(plan_numa_binding(t, NumaBinding::kExclusive, 2).cpus == range(8, 15));
}

TEST_CASE("exclusive: the first GPUs take one more core when the cores do not divide") {
  Topology t;
  for (int i = 0; i < 5; ++i) t.cpus.push_back({i, i, 0, 0, 0});
  t.gpu_numa = {0, 0};
  CHECK(plan_numa_binding(t, NumaBinding::kExclusive, 0).cpus == range(0, 2));
  CHECK(plan_numa_binding(t, NumaBinding::kExclusive, 1).cpus == range(3, 4));
  t.gpu_numa = {0, 0, 0, 0, 0, 0};
  CHECK_THROWS_WITH(plan_numa_binding(t, NumaBinding::kExclusive, 0),
                    Catch::Contains("only 5 physical cores on NUMA node 0, but there are 6 GPUs"));
}

TEST_CASE("core-complex: one L3 domain per GPU, largest first, wrapping around") {
  Topology t = two_sockets_all();
  CHECK(plan_numa_binding(t, NumaBinding::kCoreComplex, 0).cpus == range(0, 3));
  CHECK(plan_numa_binding(t, NumaBinding::kCoreComplex, 1).cpus == range(4, 7));
  // Only part of the first L3 usable: the fuller one comes first.
  TopologySource src;
  src.xml_file = kData + "two_sockets_3_gpus.xml";
  src.allowed = std::set<int>{0, 4, 5, 6, 7, 8};
  src.visible_devices = "0,1,2";
  Topology part = load_topology(src);
  CHECK(plan_numa_binding(part, NumaBinding::kCoreComplex, 0).cpus == range(4, 7));
  CHECK(plan_numa_binding(part, NumaBinding::kCoreComplex, 1).cpus == std::vector<int>{0});
}

TEST_CASE("socket: every CPU of the GPU's socket, from synthetic NUMA nodes") {
  // 2 sockets of 2 NUMA nodes each: a GPU's socket is its 2 nodes' CPUs
  TopologySource src;
  src.synthetic = "pack:2 group:2 [numa] l3:1 core:2 pu:1";
  src.allowed = all_cpus(8);
  Topology t = load_topology(src);
  REQUIRE(t.cpus.size() == 8);
  CHECK(t.cpus[2].numa == 1);
  t.gpu_numa = {1, 2};  // synthetic machines have no PCI: place the GPUs by hand
  NumaPlan p = plan_numa_binding(t, NumaBinding::kSocket, 0);
  CHECK(p.cpus == range(0, 3));
  CHECK(p.mem_nodes == std::vector<int>{0, 1});
  CHECK(plan_numa_binding(t, NumaBinding::kSocket, 1).cpus == range(4, 7));
  CHECK(plan_numa_binding(t, NumaBinding::kNode, 1).cpus == range(4, 5));
}

TEST_CASE("a rank without a GPU, or a node without usable CPUs, is an error naming the fix") {
  Topology t = two_sockets_all();
  CHECK_THROWS_WITH(plan_numa_binding(t, NumaBinding::kNode, 3),
                    Catch::Contains("local rank 3 has no GPU: this node has 3 GPU(s)"));
  TopologySource src;
  src.xml_file = kData + "two_sockets_3_gpus.xml";
  src.allowed = std::set<int>{8, 9};
  src.visible_devices = "0,1,2";
  CHECK_THROWS_WITH(plan_numa_binding(load_topology(src), NumaBinding::kNode, 0),
                    Catch::Contains("has no CPU this agent may run on"));
  src.xml_file = kData + "no_such.xml";
  CHECK_THROWS_AS(load_topology(src), Error);
}
