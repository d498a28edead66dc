//===- cuda_visible_devices.h - The GPU indexes CUDA_VISIBLE_DEVICES names -*- C++ -*-===//
//
// Two parts of the agent read CUDA_VISIBLE_DEVICES: the NUMA binding (which
// GPU sits on which node) and the health gate's GPU checks (which GPUs must
// be there). They read it one way, here, as CUDA does: entries separated by
// commas, spaces ignored, and the list ends at the first negative index
// (CUDA makes only the devices before an invalid index visible; an index
// past the GPUs present is the caller's to cut, as it knows the count).
//
//   cuda_device_indexes("0, 2")          -> {0, 2}
//   cuda_device_indexes("1,-1,3")        -> {1}
//   cuda_device_indexes("GPU-8f2c,GPU-1") -> nullopt (named by UUID)
//
// Header-only: the NUMA module (a library of its own) uses it too.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace ccrun::agent {

// The indexes; nullopt when an entry is not an index (a UUID, a MIG
// instance): then no index is known. An empty text gives none.
inline std::optional<std::vector<int>> cuda_device_indexes(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
    if (item.empty()) continue;
    char* end = nullptr;
    long i = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0') return std::nullopt;
    if (i < 0) break;
    out.push_back(int(i));
  }
  return out;
}

}  // namespace ccrun::agent
