//===- ccrun/fnv1a.h - A stable 64-bit digest of bytes ----------*- C++ -*-===//
//
// FNV-1a, 64-bit: the same value in every process and every build (unlike
// std::hash), for ids that cross processes: a subgroup's id in the progress
// record (the Python start-up hook computes the same), a stack's class in a
// node's share of a hang's evidence. Not for anything an adversary chooses.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string_view>

namespace ccrun {

constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;

// `h` (kFnv1a64Offset to start) updated with `bytes`.
constexpr uint64_t fnv1a64(std::string_view bytes, uint64_t h = kFnv1a64Offset) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace ccrun
