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
                         uint64_t slot, std::chrono::milliseconds timeout) {
  const int n = context->size, r = context->rank;
  const size_t chunk = count * elem_size;
  if (n == 1 || chunk == 0) {
    std::memcpy(recv, static_cast<const char*>(send) + r * chunk, chunk);
    return;
  }
  // Rank r owns chunk r at the end. At step s it receives chunk
  // (r - s - 2) mod n from its left neighbour, reduces its own data into it
  // and, unless it was the last step, passes it on to the right at step s+1.
  const int right = (r + 1) % n, left = (r + n - 1) % n, steps = n - 1;
  auto chunk_at = [&](int s) { return size_t(((r - s - 2) % n + 2 * n) % n); };
  const size_t seg = std::max(elem_size, kSegmentBytes / elem_size * elem_size);
  const size_t nseg = (chunk + seg - 1) / seg;
  auto seg_len = [&](size_t k) { return std::min(seg, chunk - k * seg); };

  std::vector<char> acc(static_cast<const char*>(send), static_cast<const char*>(send) + n * chunk);
  std::vector<char> tmp(2 * chunk);  // step s receives into half s % 2
  auto accb = context->createUnboundBuffer(acc.data(), acc.size());
  auto tmpb = context->createUnboundBuffer(tmp.data(), tmp.size());
  auto post_recvs = [&](int s) {
    for (size_t k = 0; k < nseg; ++k) tmpb->recv(left, slot, (s % 2) * chunk + k * seg, seg_len(k));
  };

  size_t sends = 0;
  post_recvs(0);
  if (steps > 1) post_recvs(1);
  // Step 0 sends this rank's own data of the chunk its right neighbour
  // reduces first: chunk (r - 1) mod n.
  const size_t first = size_t((r + n - 1) % n) * chunk;
  for (size_t k = 0; k < nseg; ++k, ++sends) accb->send(right, slot, first + k * seg, seg_len(k));
  for (int s = 0; s < steps; ++s) {
    const size_t c = chunk_at(s) * chunk;
    for (size_t k = 0; k < nseg; ++k) {
      wait_recv(*tmpb, timeout);  // segments arrive in order from one peer
      char* mine = acc.data() + c + k * seg;
      reduce(mine, mine, tmp.data() + (s % 2) * chunk + k * seg, seg_len(k) / elem_size);
      if (s + 1 < steps) {
        accb->send(right, slot, c + k * seg, seg_len(k));
        ++sends;
      }
    }
    if (s + 2 < steps) post_recvs(s + 2);  // half s % 2 is reduced and free
  }
  for (size_t i = 0; i < sends; ++i) wait_send(*accb, timeout);
  std::memcpy(recv, acc.data() + r * chunk, chunk);
}

}  // namespace ccrun::collectives
