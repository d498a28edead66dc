//===- ccrun/numa_binding.h - --numa-binding's modes ------------*- C++ -*-===//
//
// The ways torch 2.x's --numa-binding binds a worker to the CPUs near the
// GPU whose index is its local rank, with their one name table: the
// launcher's flag, its help line, its error and the shell completion all
// read kNumaBindingNames. A mode is parsed once, where it enters:
//
//   NumaBinding m = parse_numa_binding("exclusive");  // throws ConfigError naming the valid ones
//   std::string_view name = numa_binding_name(m);     // "exclusive"
//
// What each mode picks is ccrun/numa_plan.h's concern.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "ccrun/error.h"
#include "ccrun/name_table.h"

namespace ccrun {

enum class NumaBinding {
  kNone,         // no binding (the flag not given)
  kNode,         // every CPU of the GPU's NUMA node
  kSocket,       // every CPU of the NUMA nodes of the GPU's socket
  kExclusive,    // a disjoint share of the GPU's NUMA node's physical cores
  kCoreComplex,  // one L3 cache domain (core complex) of the GPU's NUMA node
};

struct NumaBindingName {
  std::string_view name;
  NumaBinding value;
  std::string_view help;  // one line: what the worker is bound to
};
// Every mode torch names, in torch's order (the order of --help and errors).
inline constexpr std::array<NumaBindingName, 4> kNumaBindingNames{{
    {"node", NumaBinding::kNode, "all CPUs of the NUMA node of the rank's GPU"},
    {"socket", NumaBinding::kSocket, "all CPUs of the NUMA nodes of the GPU's socket"},
    {"exclusive", NumaBinding::kExclusive,
     "a disjoint share of the physical cores of the GPU's NUMA node"},
    {"core-complex", NumaBinding::kCoreComplex,
     "one L3 cache domain (core complex) of the GPU's NUMA node"},
}};

// "node, socket, exclusive or core-complex".
inline std::string numa_binding_names() { return names_text(kNumaBindingNames); }

// The mode `name` means; "" is kNone. Throws ConfigError "unknown mode; use
// node, socket, exclusive or core-complex" (the caller adds where it came
// from).
[[nodiscard]] inline NumaBinding parse_numa_binding(std::string_view name) {
  if (name.empty()) return NumaBinding::kNone;
  if (const auto* m = find_name(kNumaBindingNames, name)) return m->value;
  throw ConfigError("unknown mode; use " + numa_binding_names());
}

// The mode's name, as parse_numa_binding reads it back ("" for kNone).
[[nodiscard]] inline std::string_view numa_binding_name(NumaBinding mode) {
  return name_of(kNumaBindingNames, mode, "");
}

}  // namespace ccrun
