// Reduce-scatter as a pipelined ring over gloo's unbound buffers (see
// ring_reduce_scatter.h).
#include "ring_reduce_scatter.h"

#include <gloo/common/error.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace ccrun::collectives {
namespace {

// Segments of a chunk travel separately so that reducing one overlaps the
// transfer of the next; much smaller segments cost more messages than they
// save.
constexpr size_t kSegmentBytes = 512 * 1024;

void wait_recv(gloo::transport::UnboundBuffer& b, std::chrono::milliseconds timeout) {
  if (!b.waitRecv(nullptr, timeout)) throw gloo::IoException("reduce_scatter: receive aborted");
}
void wait_send(gloo::transport::UnboundBuffer& b, std::chrono::milliseconds timeout) {
  if (!b.waitSend(nullptr, timeout)) throw gloo::IoException("reduce_scatter: send aborted");
}

}  // namespace

void ring_reduce_scatter(const std::shared_ptr<gloo::Context>& context, const void* send,
                         void* recv, size_t count, size_t elem_size, ReduceFn reduce,
                         uint64_t slot, std::chrono::milliseconds timeout,
                         std::vector<char>& scratch) {
  const int n = context->size, r = context->rank;
  const size_t chunk = count * elem_size;
  const char* in = static_cast<const char*>(send);
  if (n == 1 || chunk == 0) {
    std::memcpy(recv, in + r * chunk, chunk);
    return;
  }
  // Rank r owns chunk r at the end. At step s it receives the partial
  // reduction of chunk (r - s - 2) mod n from its left neighbour, reduces its
  // own part of that chunk into it and passes it on to the right at step
  // s+1; the last step reduces straight into `recv`.
  const int right = (r + 1) % n, left = (r + n - 1) % n, steps = n - 1;
  auto chunk_at = [&](int s) { return size_t(((r - s - 2) % n + 2 * n) % n); };
  const size_t seg = std::max(elem_size, kSegmentBytes / elem_size * elem_size);
  const size_t nseg = (chunk + seg - 1) / seg;
  auto seg_len = [&](size_t k) { return std::min(seg, chunk - k * seg); };

  // Step s receives into half s % 2 of the scratch, reduces there and sends
  // from there at step s+1. The scratch is the group's, reused across calls:
  // fresh pages for every call would cost more than the reduction.
  if (scratch.size() < 2 * chunk) scratch.resize(2 * chunk);
  char* tmp = scratch.data();
  // gloo's buffers are not const; the input is only ever sent from.
  auto inb = context->createUnboundBuffer(const_cast<char*>(in), n * chunk);
  auto tmpb = context->createUnboundBuffer(tmp, 2 * chunk);
  auto post_recvs = [&](int s) {
    for (size_t k = 0; k < nseg; ++k) tmpb->recv(left, slot, (s % 2) * chunk + k * seg, seg_len(k));
  };

  // Step 0 sends this rank's own part of chunk (r - 1) mod n, which its right
  // neighbour reduces first.
  post_recvs(0);
  const size_t first = size_t((r + n - 1) % n) * chunk;
  for (size_t k = 0; k < nseg; ++k) inb->send(right, slot, first + k * seg, seg_len(k));
  size_t tmp_sends = 0;  // sends from half (s - 1) % 2 still in flight
  for (int s = 0; s < steps; ++s) {
    char* half = tmp + (s % 2) * chunk;
    const char* own = in + chunk_at(s) * chunk;
    const bool last = s + 1 == steps;
    if (s == 0) {
      if (steps > 1) post_recvs(1);
    } else {
      // Half (s + 1) % 2 was sent from during step s - 1: reuse it once those
      // sends are through.
      for (; tmp_sends > 0; --tmp_sends) wait_send(*tmpb, timeout);
      if (!last) post_recvs(s + 1);
    }
    for (size_t k = 0; k < nseg; ++k) {
      wait_recv(*tmpb, timeout);  // segments arrive in order from one peer
      const size_t off = k * seg, len = seg_len(k);
      if (last) {
        reduce(static_cast<char*>(recv) + off, half + off, own + off, len / elem_size);
      } else {
        reduce(half + off, half + off, own + off, len / elem_size);
        tmpb->send(right, slot, (s % 2) * chunk + off, len);
        ++tmp_sends;
      }
    }
    if (s == 0) {
      for (size_t k = 0; k < nseg; ++k) wait_send(*inb, timeout);
    }
  }
  for (; tmp_sends > 0; --tmp_sends) wait_send(*tmpb, timeout);
}

}  // namespace ccrun::collectives
