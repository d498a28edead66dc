//===- durations.h - Durations in error messages ----------------*- C++ -*-===//
//
// One spelling of a timeout in every collectives message: "30s", or "250ms"
// when it is not whole seconds.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <string>

namespace ccrun::collectives {

inline std::string format_secs(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + "s"
                               : std::to_string(d.count()) + "ms";
}

}  // namespace ccrun::collectives
