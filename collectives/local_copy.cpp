// Single-copy transfers between ranks on one host (see local_copy.h).
#include "local_copy.h"

#include <gloo/common/error.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "unbound_waits.h"

namespace ccrun::collectives {
namespace {

std::string boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

// Reads len bytes at addr of process pid; false if the kernel refuses.
bool read_from(pid_t pid, uint64_t addr, void* dst, size_t len) {
  char* out = static_cast<char*>(dst);
  while (len > 0) {
    iovec local{out, len};
    iovec remote{reinterpret_cast<void*>(addr), len};
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out += n;
    addr += uint64_t(n);
    len -= size_t(n);
  }
  return true;
}

}  // namespace

std::unique_ptr<LocalPeers> LocalPeers::probe(store::Store& store, int rank, int size,
                                              std::chrono::milliseconds timeout) {
  if (const char* v = std::getenv("CCRUN_GLOO_LOCAL_COPY"); v && std::string(v) == "0") return nullptr;
  if (size < 2) return nullptr;
  // The nonce lives on this stack frame until every rank has said whether
  // it could read it (the second round below).
  volatile uint64_t nonce = std::random_device{}() * 0x9E3779B97F4A7C15ull + 1;
  const uint64_t mine = nonce;
  std::ostringstream me;
  me << boot_id() << ' ' << getpid() << ' ' << reinterpret_cast<uintptr_t>(&nonce) << ' ' << mine;
  store.set("local/" + std::to_string(rank), me.str());
  std::vector<std::string> keys, ok_keys;
  for (int r = 0; r < size; ++r) {
    keys.push_back("local/" + std::to_string(r));
    ok_keys.push_back("local_ok/" + std::to_string(r));
  }
  store.wait(keys, timeout);
  std::vector<std::string> all = store.multi_get(keys);
  std::vector<pid_t> pids(size);
  bool ok = true;
  const std::string my_boot = boot_id();
  for (int r = 0; r < size; ++r) {
    std::istringstream in(all[r]);
    std::string boot;
    long pid = 0;
    uint64_t addr = 0, value = 0;
    in >> boot >> pid >> addr >> value;
    pids[r] = pid_t(pid);
    if (r == rank) continue;
    uint64_t seen = 0;
    ok = ok && !boot.empty() && boot == my_boot && read_from(pid_t(pid), addr, &seen, sizeof seen) &&
         seen == value;
  }
  store.set("local_ok/" + std::to_string(rank), ok ? "1" : "0");
  store.wait(ok_keys, timeout);
  bool everyone = true;
  for (const std::string& v : store.multi_get(ok_keys)) everyone = everyone && v == "1";
  if (!everyone) return nullptr;
  return std::unique_ptr<LocalPeers>(new LocalPeers(std::move(pids)));
}

void LocalPeers::read(int peer, uint64_t addr, void* dst, size_t len) const {
  if (!read_from(pids_[peer], addr, dst, len)) {
    throw gloo::IoException("cannot read rank " + std::to_string(peer) + "'s memory (pid " +
                            std::to_string(pids_[peer]) + "): " + std::strerror(errno) +
                            "; the rank may have died");
  }
}

void local_broadcast(const LocalExchange& x, void* data, size_t bytes, int root) {
  const int n = x.context->size, r = x.context->rank;
  if (n == 1 || bytes == 0) return;
  uint64_t addr = reinterpret_cast<uintptr_t>(data);
  char ack = 0;
  auto addrb = x.context->createUnboundBuffer(&addr, sizeof addr);
  auto ackb = x.context->createUnboundBuffer(&ack, 1);
  if (r == root) {
    // Every rank reads from here: keep `data` as it is until all say done.
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      ackb->recv(p, x.ack_slot, 0, 0);
      addrb->send(p, x.address_slot);
    }
    wait_sends(*addrb, n - 1, x.timeout);
    wait_recvs(*ackb, n - 1, x.timeout);
  } else {
    addrb->recv(root, x.address_slot);
    wait_recvs(*addrb, 1, x.timeout);
    x.peers->read(root, addr, data, bytes);
    ackb->send(root, x.ack_slot, 0, 0);
    wait_sends(*ackb, 1, x.timeout);
  }
}

void local_all_gather(const LocalExchange& x, const void* send, void* recv, size_t bytes) {
  const int n = x.context->size, r = x.context->rank;
  char* out = static_cast<char*>(recv);
  if (bytes == 0) return;
  if (out + r * bytes != send) std::memcpy(out + r * bytes, send, bytes);
  if (n == 1) return;
  // Peers read this rank's part where it already is: `send`, or part r of
  // `recv` when the two are one.
  std::vector<uint64_t> addrs(n);
  addrs[r] = reinterpret_cast<uintptr_t>(send);
  char ack = 0;
  auto addrb = x.context->createUnboundBuffer(addrs.data(), n * sizeof(uint64_t));
  auto ackb = x.context->createUnboundBuffer(&ack, 1);
  for (int k = 1; k < n; ++k) {
    int p = (r + k) % n;
    addrb->recv(p, x.address_slot, p * sizeof(uint64_t), sizeof(uint64_t));
    ackb->recv(p, x.ack_slot, 0, 0);
  }
  for (int k = 1; k < n; ++k) addrb->send((r + k) % n, x.address_slot, r * sizeof(uint64_t), sizeof(uint64_t));
  wait_recvs(*addrb, n - 1, x.timeout);
  for (int k = 1; k < n; ++k) {
    int p = (r + k) % n;
    x.peers->read(p, addrs[p], out + p * bytes, bytes);
  }
  // Done reading: tell every peer, and wait until every peer is done with
  // this rank's part before the caller may touch it again.
  for (int k = 1; k < n; ++k) ackb->send((r + k) % n, x.ack_slot, 0, 0);
  wait_sends(*addrb, n - 1, x.timeout);
  wait_sends(*ackb, n - 1, x.timeout);
  wait_recvs(*ackb, n - 1, x.timeout);
}

namespace {

// Exchanges this rank's `mine` with every peer: addrs[p] becomes rank p's.
std::unique_ptr<gloo::transport::UnboundBuffer> exchange_addresses(const LocalExchange& x, std::vector<uint64_t>& addrs,
                                            uint64_t mine) {
  const int n = x.context->size, r = x.context->rank;
  addrs.assign(n, 0);
  addrs[r] = mine;
  auto b = x.context->createUnboundBuffer(addrs.data(), n * sizeof(uint64_t));
  for (int k = 1; k < n; ++k) {
    int p = (r + k) % n;
    b->recv(p, x.address_slot, p * sizeof(uint64_t), sizeof(uint64_t));
  }
  for (int k = 1; k < n; ++k) b->send((r + k) % n, x.address_slot, r * sizeof(uint64_t), sizeof(uint64_t));
  wait_recvs(*b, n - 1, x.timeout);
  wait_sends(*b, n - 1, x.timeout);
  return b;
}

// Tells every peer this rank is done reading, and waits until they all are.
void exchange_acks(const LocalExchange& x) {
  const int n = x.context->size, r = x.context->rank;
  auto b = x.context->createUnboundBuffer(nullptr, 0);
  for (int k = 1; k < n; ++k) b->recv((r + k) % n, x.ack_slot, 0, 0);
  for (int k = 1; k < n; ++k) b->send((r + k) % n, x.ack_slot, 0, 0);
  wait_sends(*b, n - 1, x.timeout);
  wait_recvs(*b, n - 1, x.timeout);
}

// Reads and reductions go by segments this size, so that the buffers they
// use stay in cache.
constexpr size_t kReduceSegmentBytes = 256 * 1024;

// out = part(0) op part(1) op ... op part(n-1) over `bytes`, segment by
// segment, where part(i) is rank i's memory at addrs[i] + peer_offset and
// this rank's own part is `own_src` (copied per segment, since `out` may be
// it).
void reduce_from_peers(const LocalExchange& x, const std::vector<uint64_t>& addrs,
                       size_t peer_offset, const char* own_src, char* out, size_t bytes,
                       size_t elem_size, ReduceFn reduce, std::vector<char>& scratch) {
  const int n = x.context->size, r = x.context->rank;
  const size_t seg = std::max(elem_size, kReduceSegmentBytes / elem_size * elem_size);
  if (scratch.size() < 3 * seg) scratch.resize(3 * seg);
  char* own = scratch.data();
  char* a = own + seg;
  char* b = a + seg;
  for (size_t off = 0; off < bytes; off += seg) {
    const size_t len = std::min(seg, bytes - off), elems = len / elem_size;
    std::memcpy(own, own_src + off, len);
    auto part = [&](int i, char* into) -> const char* {
      if (i == r) return own;
      x.peers->read(i, addrs[i] + peer_offset + off, into, len);
      return into;
    };
    const char* p0 = part(0, a);
    const char* p1 = part(1, b);
    reduce(out + off, p0, p1, elems);
    for (int i = 2; i < n; ++i) reduce(out + off, out + off, part(i, a), elems);
  }
}

}  // namespace

void local_reduce_scatter(const LocalExchange& x, const void* send, void* recv, size_t count,
                          size_t elem_size, ReduceFn reduce, bool wait_for_readers,
                          std::vector<char>& scratch) {
  const int n = x.context->size, r = x.context->rank;
  const size_t bytes = count * elem_size;
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (bytes == 0) return;
  if (n == 1) {
    if (out != in) std::memcpy(out, in, bytes);
    return;
  }
  std::vector<uint64_t> addrs;
  exchange_addresses(x, addrs, reinterpret_cast<uintptr_t>(send));
  reduce_from_peers(x, addrs, r * bytes, in + r * bytes, out, bytes, elem_size, reduce, scratch);
  if (wait_for_readers) exchange_acks(x);
}

namespace {

// Non-root ranks send root their address and wait until root says it is
// done; root gets every address (addrs[p]), runs `work`, then says so.
template <typename Work>
void gather_addresses_then(const LocalExchange& x, uint64_t mine, int root, Work&& work) {
  const int n = x.context->size, r = x.context->rank;
  std::vector<uint64_t> addrs(n, 0);
  addrs[r] = mine;
  auto b = x.context->createUnboundBuffer(addrs.data(), n * sizeof(uint64_t));
  auto ack = x.context->createUnboundBuffer(nullptr, 0);
  if (r != root) {
    ack->recv(root, x.ack_slot, 0, 0);
    b->send(root, x.address_slot, r * sizeof(uint64_t), sizeof(uint64_t));
    wait_sends(*b, 1, x.timeout);
    wait_recvs(*ack, 1, x.timeout);
    return;
  }
  for (int p = 0; p < n; ++p) {
    if (p != r) b->recv(p, x.address_slot, p * sizeof(uint64_t), sizeof(uint64_t));
  }
  wait_recvs(*b, n - 1, x.timeout);
  work(addrs);
  for (int p = 0; p < n; ++p) {
    if (p != r) ack->send(p, x.ack_slot, 0, 0);
  }
  wait_sends(*ack, n - 1, x.timeout);
}

}  // namespace

void local_reduce(const LocalExchange& x, void* data, size_t count, size_t elem_size,
                  ReduceFn reduce, int root, std::vector<char>& scratch) {
  const int n = x.context->size;
  const size_t bytes = count * elem_size;
  if (n == 1 || bytes == 0) return;
  char* out = static_cast<char*>(data);
  gather_addresses_then(x, reinterpret_cast<uintptr_t>(data), root, [&](const std::vector<uint64_t>& addrs) {
    reduce_from_peers(x, addrs, 0, out, out, bytes, elem_size, reduce, scratch);
  });
}

void local_gather(const LocalExchange& x, const void* send, void* recv, size_t bytes, int root) {
  const int n = x.context->size, r = x.context->rank;
  if (bytes == 0) return;
  char* out = static_cast<char*>(recv);
  gather_addresses_then(x, reinterpret_cast<uintptr_t>(send), root, [&](const std::vector<uint64_t>& addrs) {
    for (int p = 0; p < n; ++p) {
      if (p == r) {
        if (out + r * bytes != send) std::memcpy(out + r * bytes, send, bytes);
      } else {
        x.peers->read(p, addrs[p], out + p * bytes, bytes);
      }
    }
  });
}

void local_scatter(const LocalExchange& x, const void* send, void* recv, size_t bytes, int root) {
  const int n = x.context->size, r = x.context->rank;
  if (bytes == 0) return;
  const char* in = static_cast<const char*>(send);
  if (r == root && in + r * bytes != recv) std::memcpy(recv, in + r * bytes, bytes);
  if (n == 1) return;
  // The reverse of gather: root's address out, every rank reads its part.
  uint64_t addr = reinterpret_cast<uintptr_t>(send);
  auto b = x.context->createUnboundBuffer(&addr, sizeof addr);
  auto ack = x.context->createUnboundBuffer(nullptr, 0);
  if (r == root) {
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      ack->recv(p, x.ack_slot, 0, 0);
      b->send(p, x.address_slot);
    }
    wait_sends(*b, n - 1, x.timeout);
    wait_recvs(*ack, n - 1, x.timeout);
  } else {
    b->recv(root, x.address_slot);
    wait_recvs(*b, 1, x.timeout);
    x.peers->read(root, addr + r * bytes, recv, bytes);
    ack->send(root, x.ack_slot, 0, 0);
    wait_sends(*ack, 1, x.timeout);
  }
}

}  // namespace ccrun::collectives
