//===- local_copy.h - Single-copy transfers between ranks on one host -*- C++ -*-=//
//
// Over loopback TCP a large message is copied twice (into the socket, out of
// it) and wakes the receiver once per socket buffer. Ranks that share a
// kernel can instead read each other's buffers directly (process_vm_readv,
// "cross memory attach", as MPI's shared-memory transports do): one copy,
// made by the reader, with no wake-ups in between. Only addresses and
// acknowledgements travel over the group's connections.
//
// Whether that works is probed once per group: ranks in other containers or
// pid namespaces, a seccomp policy or a ptrace restriction make the group
// keep TCP, and so does CCRUN_GLOO_LOCAL_COPY=0.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <gloo/context.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ccrun/store.h"
#include "reduce_functions.h"

namespace ccrun::collectives {

class LocalPeers {
 public:
  // Collective over the group's store: every rank publishes its kernel's
  // boot id, its pid and a nonce in its memory, then reads every peer's
  // nonce. Returns nullptr unless every rank read every other (or when
  // CCRUN_GLOO_LOCAL_COPY=0); all ranks reach the same answer.
  static std::unique_ptr<LocalPeers> probe(store::Store& store, int rank, int size,
                                           std::chrono::milliseconds timeout);

  // Copies `len` bytes at `addr` in rank `peer`'s memory to `dst`. Throws
  // gloo::IoException if the peer is gone.
  void read(int peer, uint64_t addr, void* dst, size_t len) const;

 private:
  explicit LocalPeers(std::vector<pid_t> pids) : pids_(std::move(pids)) {}
  std::vector<pid_t> pids_;
};

// What a local transfer needs: the group's context and peers, two slots
// (addresses, acknowledgements) no other operation in flight uses, the
// timeout.
struct LocalExchange {
  std::shared_ptr<gloo::Context> context;
  const LocalPeers* peers;
  uint64_t address_slot, ack_slot;
  std::chrono::milliseconds timeout;
};

// `bytes` of `data` on every rank become root's: each rank reads them from
// root, which returns once all have.
void local_broadcast(const LocalExchange& x, void* data, size_t bytes, int root);

// Part p of `recv` (size x `bytes`) becomes rank p's `send` (`bytes`); `send`
// may be part `rank` of `recv`. Returns once every rank has read this rank's
// part.
void local_all_gather(const LocalExchange& x, const void* send, void* recv, size_t bytes);

// `recv` (count elements) becomes part `rank` of the reduction over every
// rank's `send` (size x count elements), the contributions combined in rank
// order (same bits on every rank). `recv` may be part `rank` of `send`.
// Peers read `send` while this runs; with `wait_for_readers`, this returns
// only once every peer is done with it (false: the caller makes sure by a
// later step, as all_reduce's gather does). `scratch` is reused.
void local_reduce_scatter(const LocalExchange& x, const void* send, void* recv, size_t count,
                          size_t elem_size, ReduceFn reduce, bool wait_for_readers,
                          std::vector<char>& scratch);

// On root, `data` (count elements) becomes the reduction over every rank's
// `data`, read from the peers in segments; other ranks' buffers are left as
// they were, and they return once root is done reading them.
void local_reduce(const LocalExchange& x, void* data, size_t count, size_t elem_size,
                  ReduceFn reduce, int root, std::vector<char>& scratch);

// Root's `recv` (size x `bytes`) gets rank p's `send` at part p.
void local_gather(const LocalExchange& x, const void* send, void* recv, size_t bytes, int root);

// Rank p's `recv` (`bytes`) gets part p of root's `send`.
void local_scatter(const LocalExchange& x, const void* send, void* recv, size_t bytes, int root);

}  // namespace ccrun::collectives
