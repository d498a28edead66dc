// One-step collectives for small buffers over gloo's unbound buffers (see
// direct_exchange.h).
#include "direct_exchange.h"

#include <cstring>

#include "unbound_waits.h"

namespace ccrun::collectives {
namespace {

// Peer k of n - 1 for rank r: r+1, r+2, ... so that ranks start on
// different peers instead of all sending to rank 0 first.
int peer(int r, int k, int n) { return (r + k) % n; }

// c = part(0) op part(1) op ... op part(n-1), always in that order; c may
// be part(0) but no later part.
template <typename Part>
void reduce_in_rank_order(void* c, Part part, int n, size_t count, ReduceFn reduce) {
  reduce(c, part(0), part(1), count);
  for (int i = 2; i < n; ++i) reduce(c, c, part(i), count);
}

// Posts a receive from every peer p of its `bytes` into slot p of `buf`
// (at p * bytes).
void recv_every_peer(const Exchange& x, gloo::transport::UnboundBuffer& buf, size_t bytes) {
  const int n = x.context->size, r = x.context->rank;
  for (int k = 1; k < n; ++k) {
    int p = peer(r, k, n);
    buf.recv(p, x.slot, p * bytes, bytes);
  }
}

}  // namespace

void direct_all_reduce(const Exchange& x, void* data, size_t count, size_t elem_size,
                       ReduceFn reduce, std::vector<char>& scratch) {
  const int n = x.context->size, r = x.context->rank;
  const size_t bytes = count * elem_size;
  if (n == 1 || bytes == 0) return;
  if (scratch.size() < n * bytes) scratch.resize(n * bytes);
  char* slots = scratch.data();
  std::memcpy(slots + r * bytes, data, bytes);
  auto buf = x.context->createUnboundBuffer(slots, n * bytes);
  recv_every_peer(x, *buf, bytes);
  for (int k = 1; k < n; ++k) buf->send(peer(r, k, n), x.slot, r * bytes, bytes);
  wait_recvs(*buf, n - 1, x.timeout);
  // `data` is written from the first step on, so its own part is read from
  // the copy in slot r.
  reduce_in_rank_order(data, [&](int i) { return slots + i * bytes; }, n, count, reduce);
  wait_sends(*buf, n - 1, x.timeout);
}

void direct_all_gather(const Exchange& x, const void* send, void* recv, size_t bytes) {
  const int n = x.context->size, r = x.context->rank;
  char* out = static_cast<char*>(recv);
  if (bytes == 0) return;
  if (out + r * bytes != send) std::memcpy(out + r * bytes, send, bytes);
  if (n == 1) return;
  auto buf = x.context->createUnboundBuffer(out, n * bytes);
  recv_every_peer(x, *buf, bytes);
  for (int k = 1; k < n; ++k) buf->send(peer(r, k, n), x.slot, r * bytes, bytes);
  wait_recvs(*buf, n - 1, x.timeout);
  wait_sends(*buf, n - 1, x.timeout);
}

void direct_broadcast(const Exchange& x, void* data, size_t bytes, int root) {
  const int n = x.context->size, r = x.context->rank;
  if (n == 1 || bytes == 0) return;
  auto buf = x.context->createUnboundBuffer(data, bytes);
  if (r == root) {
    for (int k = 1; k < n; ++k) buf->send(peer(r, k, n), x.slot, 0, bytes);
    wait_sends(*buf, n - 1, x.timeout);
  } else {
    buf->recv(root, x.slot, 0, bytes);
    wait_recvs(*buf, 1, x.timeout);
  }
}

void direct_reduce(const Exchange& x, void* data, size_t count, size_t elem_size, ReduceFn reduce,
                   int root, std::vector<char>& scratch) {
  const int n = x.context->size, r = x.context->rank;
  const size_t bytes = count * elem_size;
  if (n == 1 || bytes == 0) return;
  if (r != root) {
    auto buf = x.context->createUnboundBuffer(data, bytes);
    buf->send(root, x.slot, 0, bytes);
    wait_sends(*buf, 1, x.timeout);
    return;
  }
  if (scratch.size() < n * bytes) scratch.resize(n * bytes);
  char* slots = scratch.data();
  std::memcpy(slots + r * bytes, data, bytes);
  auto buf = x.context->createUnboundBuffer(slots, n * bytes);
  recv_every_peer(x, *buf, bytes);
  wait_recvs(*buf, n - 1, x.timeout);
  reduce_in_rank_order(data, [&](int i) { return slots + i * bytes; }, n, count, reduce);
}

void direct_reduce_scatter(const Exchange& x, const void* send, void* recv, size_t count,
                           size_t elem_size, ReduceFn reduce, std::vector<char>& scratch) {
  const int n = x.context->size, r = x.context->rank;
  const size_t bytes = count * elem_size;
  const char* in = static_cast<const char*>(send);
  if (bytes == 0) return;
  if (n == 1) {
    std::memcpy(recv, in, bytes);
    return;
  }
  if (scratch.size() < n * bytes) scratch.resize(n * bytes);
  char* slots = scratch.data();  // slot p: rank p's part r; slot r unused
  auto slotb = x.context->createUnboundBuffer(slots, n * bytes);
  // gloo's buffers are not const; the input is only ever sent from.
  auto inb = x.context->createUnboundBuffer(const_cast<char*>(in), n * bytes);
  for (int k = 1; k < n; ++k) {
    int p = peer(r, k, n);
    slotb->recv(p, x.slot, p * bytes, bytes);
  }
  for (int k = 1; k < n; ++k) {
    int p = peer(r, k, n);
    inb->send(p, x.slot, p * bytes, bytes);
  }
  wait_recvs(*slotb, n - 1, x.timeout);
  auto part = [&](int i) -> const char* { return i == r ? in + r * bytes : slots + i * bytes; };
  reduce_in_rank_order(recv, part, n, count, reduce);
  wait_sends(*inb, n - 1, x.timeout);
}

}  // namespace ccrun::collectives
