//===- ccrun/etcd_store.h - A Store on an etcd v3 cluster -------*- C++ -*-===//
//
// `EtcdStore` keeps a job's keys in etcd (v3 API, etcd >= 3.4), under one
// key prefix, so that the rendezvous outlives any one machine: with three
// or five etcd members, losing one (its leader included) loses nothing.
//
//   EtcdStoreOptions opts;
//   opts.endpoints = {{"10.0.0.1", 2379}, {"10.0.0.2", 2379}, {"10.0.0.3", 2379}};
//   opts.prefix = "ccrun/job7/";
//   EtcdStore store(opts);
//   store.add("arrived", 1);               // a transaction, exactly once
//   store.wait({"ready/0", "ready/1"});    // a watch, no polling
//
// It talks to etcd's v3 JSON gateway (HTTP/1.1 POST /v3/kv/..., keys and
// values base64), the same API etcdctl uses underneath, over plain TCP or
// TLS. Every Store operation maps onto one etcd request:
//   set/multi_set      put / one txn of puts
//   get/check/multi_get one txn of ranges, one revision for all keys: the
//                      span from the least key to the greatest (4 keys or
//                      more, unless the span holds many others) or a range
//                      per key; values with their counter journals
//   add                txn: put a journal entry of the delta (created at
//                      "0" when missing), read the key and its journal;
//                      never retried on conflict: N concurrent adds are N
//                      commits in parallel, not a chain (etcd_requests.h)
//   append/compare_set txn: compare mod_revision (and journal), put;
//                      retried on conflict
//   wait               a watch of the keys' span, then the keys read at the
//                      revision etcd confirmed it at (no set can be missed)
//   delete_key         deleterange; num_keys: a count-only range
// add, append and compare_set are applied exactly once even when the member
// that served them dies mid-request: their transaction also records a
// per-client sequence number (keys under "<prefix>\0ccrun-ops/", invisible to
// num_keys), read back after an ambiguous failure to tell whether it
// happened. (A store whose prefix encloses another client's prefix counts
// that client's sequence keys in num_keys(): one per connection, removed
// when that client's EtcdStore is destroyed; and its counters' journal
// entries, under "<prefix>\0ccrun-add/", at most a few dozen per counter.)
//
// Fail-over: a call goes to the member that answered last; a member that
// refuses, closes, or does not answer within request_timeout is left for the
// next one in the list, until one answers or connect_timeout passes.
//
// Thread-safe: each calling thread borrows a connection from a small pool
// (a blocked wait holds one; other threads open more as needed).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ccrun/store.h"
#include "ccrun/store_interrupt.h"

namespace ccrun::store {

struct EtcdEndpoint {
  std::string host;     // name or IP address (IPv6 without brackets)
  uint16_t port = 2379;
};

struct EtcdStoreOptions {
  // The cluster's client URLs; at least one. Tried in order after a failure.
  std::vector<EtcdEndpoint> endpoints;
  // Every key lives under it ("/" appended when missing). Not empty.
  std::string prefix = "ccrun/";
  // Timeout of get, wait and multi_get (Store::timeout()).
  std::chrono::milliseconds timeout = kDefaultStoreTimeout;
  // One request on one member (connect, send, reply) before trying the next.
  std::chrono::milliseconds request_timeout{5'000};
  // How long a call keeps trying members before ConnectionError.
  std::chrono::milliseconds connect_timeout{60'000};
  // etcd authentication (`etcdctl auth enable`): both or neither. The token
  // from /v3/auth/authenticate goes with every request, renewed on expiry.
  std::string user;
  std::string password;
  // TLS (https) to every member. ca_file: PEM bundle to verify the members
  // against (empty: the system's); cert_file/key_file: a client certificate
  // for clusters started with --client-cert-auth.
  bool tls = false;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // When set and triggered, every blocking call throws InterruptedError.
  std::shared_ptr<StoreInterrupt> interrupt;
};

class EtcdStore : public Store {
 public:
  // Checks the options and reaches one member (throws ConfigError for bad
  // options, ConnectionError when no member answers within connect_timeout,
  // AuthError for a rejected user/password).
  explicit EtcdStore(EtcdStoreOptions options);
  ~EtcdStore() override;  // removes this client's sequence-number keys

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
  int64_t num_keys() override;  // keys under the prefix
  void append(const std::string& key, const std::string& value) override;
  std::vector<std::string> multi_get(
      const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<std::string>& values) override;
  std::chrono::microseconds ping() override;

  // --- Leases (agent liveness) ---------------------------------------------
  // A lease lives `ttl` unless kept alive; when it expires, etcd deletes
  // every key attached to it (and wakes the watchers of those keys).

  // Grants a lease of `ttl` (etcd rounds it up to its minimum, a few
  // seconds); returns its id.
  [[nodiscard]] int64_t grant_lease(std::chrono::seconds ttl);
  // Renews `lease` once; returns its TTL now. Throws ccrun::Error naming the
  // lease when it has expired (its keys are gone: grant a new one).
  std::chrono::seconds keep_alive(int64_t lease);
  // Ends `lease` now, deleting its keys. An expired lease is not an error.
  void revoke_lease(int64_t lease);
  // set(), with `key` attached to `lease` (deleted when the lease ends).
  void set(const std::string& key, const std::string& value, int64_t lease);

  // This end's IP address on its connection to a member: the address other
  // machines (the member's side of the network) reach this one at, as
  // TcpStore::local_address() (for MASTER_ADDR).
  std::string local_address() override;

  // "host:port,host:port" of the members, as used in messages.
  std::string endpoints() const;
  const std::string& prefix() const { return options_.prefix; }

 private:
  class Connection;
  struct Shared;
  class Borrowed;

  Borrowed borrow();
  // The key holding the sequence number of connection `slot` (see above).
  std::string sequence_key(int slot) const;
  std::string full(const std::string& key) const { return options_.prefix + key; }
  // Puts `key` := next(its value, journal included; nullptr when missing),
  // guarded on that read, and again after each conflict until it applies;
  // a nullopt from `next` ends it without a write (append, compare_set).
  void put_guarded(
      const std::string& key,
      const std::function<std::optional<std::string>(const std::string* current)>& next);
  // Blocks until every key exists or `deadline` (then TimeoutError naming
  // the keys and `timeout`). `known_missing`: the caller has just read
  // them and some were missing (skips the first read).
  void wait_keys(Connection& c, const std::vector<std::string>& keys,
                 std::chrono::steady_clock::time_point deadline,
                 std::chrono::milliseconds timeout, bool known_missing);

  EtcdStoreOptions options_;
  std::shared_ptr<Shared> shared_;  // token, TLS context, preferred member
  std::string client_id_;           // names this client's sequence keys
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<Connection>> idle_;  // guarded by pool_mu_
  int next_slot_ = 0;                              // guarded by pool_mu_
  std::atomic<bool> wrote_sequence_keys_{false};   // removed at destruction
};

}  // namespace ccrun::store
