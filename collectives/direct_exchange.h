//===- direct_exchange.h - One-step collectives for small buffers -*- C++ -*-=//
//
// For small buffers a collective's time is its count of dependent message
// hops, not its bytes: gloo's ring all_reduce takes 2(n-1) hops, its ring
// all_gather n-1 and its tree broadcast log2(n), and on a loaded host every
// hop waits for a process to be scheduled. Here every rank posts all of its
// receives, sends to every peer at once and waits: one hop. Each rank sends
// (n-1) times its part, so these are for small buffers only; the group picks
// them below a size threshold (gloo_group.cpp).
//
// Reductions combine the n contributions in rank order on every rank, so
// every rank gets the same bits, as with the ring.
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

// What every call needs: the group's context, a slot that is the same on
// every rank and used by nothing else in flight, and the timeout. Calls
// throw gloo's exceptions on timeout or a broken peer.
struct Exchange {
  std::shared_ptr<gloo::Context> context;
  uint64_t slot;
  std::chrono::milliseconds timeout;
};

// `data` (count elements) becomes the reduction over every rank's `data`.
// `scratch` grows to size x count elements and is kept for the next call.
void direct_all_reduce(const Exchange& x, void* data, size_t count, size_t elem_size,
                       ReduceFn reduce, std::vector<char>& scratch);

// Part r of `recv` (size x `bytes`) becomes rank r's `send` (`bytes`).
// `send` may be part `rank` of `recv` itself.
void direct_all_gather(const Exchange& x, const void* send, void* recv, size_t bytes);

// `bytes` of `data` on every rank become those of `root`.
void direct_broadcast(const Exchange& x, void* data, size_t bytes, int root);

// On root, `data` (count elements) becomes the reduction over every rank's
// `data`; other ranks' buffers are left as they were.
void direct_reduce(const Exchange& x, void* data, size_t count, size_t elem_size, ReduceFn reduce,
                   int root, std::vector<char>& scratch);

// `recv` (count elements) becomes part `rank` of the reduction over every
// rank's `send` (size x count elements); `send` is left as it was.
void direct_reduce_scatter(const Exchange& x, const void* send, void* recv, size_t count,
                           size_t elem_size, ReduceFn reduce, std::vector<char>& scratch);

}  // namespace ccrun::collectives
