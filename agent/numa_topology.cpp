// load_topology through the numa module (see numa_topology.h).
#include "ccrun/numa_topology.h"

#include "module_loader.h"

namespace ccrun::agent {

Topology load_topology(const TopologySource& source) {
  auto load = reinterpret_cast<LoadTopology>(module_symbol("numa", kLoadTopologySymbol));
  Topology t;
  load(&source, &t);
  return t;
}

}  // namespace ccrun::agent
