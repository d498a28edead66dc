//===- ring_reduce_scatter.h - Reduce-scatter as a pipelined ring -*- C++ -*-=//
//
// Gloo (2022, as in Debian and torch 1.13) has no reduce-scatter for
// contiguous buffers in its current API, and reducing all of the data then
// keeping one part moves `size` times too much. This is the bandwidth-optimal
// ring: n-1 steps, each rank sending (n-1)/n of its input once, segmented so
// that reducing one segment overlaps the transfer of the next.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <gloo/context.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "reduce_functions.h"

namespace ccrun::collectives {

// Reduces `send` (context size x `count` elements of `elem_size` bytes) over
// every rank of `context` and writes part `rank` of the result (`count`
// elements) to `recv`. `send` is left as it was, except where `recv` is
// its part `rank` (allowed: all_reduce reduces in place that way). `slot` must be the same on
// every rank and used by nothing else in flight. `scratch` grows to 2 x
// count elements and is kept for the next call. Throws gloo's exceptions on
// timeout or a broken peer.
void ring_reduce_scatter(const std::shared_ptr<gloo::Context>& context, const void* send,
                         void* recv, size_t count, size_t elem_size, ReduceFn reduce,
                         uint64_t slot, std::chrono::milliseconds timeout,
                         std::vector<char>& scratch);

}  // namespace ccrun::collectives
