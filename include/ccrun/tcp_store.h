//===- ccrun/tcp_store.h - Client of a TCP store -----------------*- C++ -*-===//
//
// `TcpStore` is the Store client of a ccrun StoreServer (ccrun-rendezvous,
// or the store an agent hosts) and of PyTorch's own TCPStore servers. It
// speaks torch's 2.x dialect by default, and the 1.13 dialect for Debian's
// python3-torch servers.
//
//   TcpStoreOptions opts;
//   opts.host = "10.0.0.1";
//   opts.port = 29400;
//   TcpStore store(opts);      // connects, retrying until connect_timeout
//   store.set("k", "v");
//
// Keys go on the wire as given: torch's own client puts "/" before user
// keys, so a key a torch client set as "k" reads here as "/k".
//
// Every call is bounded: a reply comes within min(timeout, Store::timeout()),
// the first reply on a new connection also within connect_timeout,
// a wait ends within its timeout plus at most 1 s to cancel it, a connect
// (and authentication) within connect_timeout. A peer that is not a store
// (an HTTP server) is recognised on its first reply: NotAStoreError, which
// callers should not retry.
//
// Thread-safe: one connection, one request at a time. A call that loses the
// connection reconnects on the next call; idempotent calls (get, wait,
// check, set, multi_get, multi_set, num_keys, ping, add(k, 0)) retry once after a
// reconnect, the others (add, compare_set, append, delete_key) throw
// ConnectionError since the store may or may not have applied them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "ccrun/store.h"
#include "ccrun/store_interrupt.h"

namespace ccrun::store {

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 29400;
  // Timeout of get, wait and multi_get (Store::timeout(), which
  // set_timeout() changes later), and of one reply (at most Store::timeout()).
  std::chrono::milliseconds timeout = kDefaultStoreTimeout;
  // How long to keep retrying to connect (the server may start later).
  std::chrono::milliseconds connect_timeout{60'000};
  // Shared secret for a store started with --token-file (2.x dialect only).
  std::string token;
  enum class Protocol {
    kTorch2,    // ccrun's stores and torch >= 2.0 servers
    kTorch113,  // torch 1.13 servers (no append, no multi ops on the wire)
  };
  Protocol protocol = Protocol::kTorch2;
  // When set and triggered, every blocking call (connecting, waiting for a
  // reply, the pause between connection attempts) throws InterruptedError.
  std::shared_ptr<StoreInterrupt> interrupt;
};

class TcpStore : public Store {
 public:
  // Connects now; throws ConnectionError after connect_timeout.
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  void append(const std::string& key, const std::string& value) override;
  std::vector<std::string> multi_get(
      const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<std::string>& values) override;
  std::chrono::microseconds ping() override;
  // TIME, ccrun's extension: nullopt on the 1.13 dialect. A server that
  // does not know it (torch's own) closes the connection: ProtocolError or
  // ConnectionError.
  std::optional<ClockReading> read_clock() override;

  // torch 2.x's queues: a FIFO of byte strings per key, apart from the
  // keys' values (2.x dialect: ccrun's stores and torch's libuv servers
  // that have QUEUE_PUSH; NotSupportedError on the 1.13 dialect).
  //
  // Appends `value` to the queue at `key`; wakes one blocked queue_pop.
  void queue_push(const std::string& key, const std::string& value);
  // Pops the front of the queue at `key`: nullopt when it is empty. With
  // `block`, first waits up to timeout() for an item (TimeoutError), and if
  // another client takes it first, waits again until the same deadline.
  std::optional<std::string> queue_pop(const std::string& key, bool block = true);
  // Items in the queue at `key`.
  int64_t queue_len(const std::string& key);

  // ccrun's DELETE_PREFIX (ccrun's stores only, 2.x dialect): deletes every
  // key (and queue) that begins with `prefix`, but only if `guard_key` (which
  // must begin with `prefix`) exists: a finished job's done marker guards its
  // keys, so a live job's keys cannot go. Returns how many keys were deleted,
  // or nullopt when the guard key does not exist (nothing deleted). O(keys in
  // the store) on the server. Not retried after a lost connection. Agents
  // need not call it: ccrun-rendezvous expires finished jobs' keys itself
  // (--finished-job-ttl); see docs/store.md.
  //
  //   store.delete_prefix("ccrun/job7/", "ccrun/job7/round/3/all_exited");
  std::optional<size_t> delete_prefix(const std::string& prefix, const std::string& guard_key);

  // "host:port", as used in messages.
  std::string endpoint() const;

  // This end's IP address on the connection: the address the store's host
  // (and so, usually, the other nodes) reach this machine at.
  std::string local_address() override;

 private:
  class Connection;
  template <typename F>
  auto call(bool idempotent, F&& f);
  // Waits for keys on `c` (caller holds mu_). On a timeout the wait is
  // cancelled (2.x) or the connection dropped (1.13), then TimeoutError.
  void wait_locked(Connection& c, const std::vector<std::string>& keys,
                   std::chrono::milliseconds timeout);

  // How long one reply may take: options_.timeout, and never longer than
  // timeout() (an agent that set_timeout(join_timeout) gets every call
  // bounded by it, even against a peer that accepts and never answers).
  std::chrono::milliseconds reply_timeout() const;
  // now + reply_timeout(), or + connect_timeout while the connection has
  // never been answered (it is still being made).
  std::chrono::steady_clock::time_point reply_deadline(const Connection& c) const;

  TcpStoreOptions options_;
  std::mutex mu_;  // one request at a time on the connection
  std::unique_ptr<Connection> conn_;  // guarded by mu_; null when broken
};

}  // namespace ccrun::store
