//===- ccrun/store.h - The key-value store interface ------------*- C++ -*-===//
//
// `Store` is the key-value interface agents rendezvous through and workers
// bootstrap their collectives through. Its semantics are those of PyTorch's
// c10d Store, so that code written against torch's stores ports directly:
//
//   std::shared_ptr<Store> store = open_store("tcp://10.0.0.1:29400");  // store_address.h
//   store->set("rank0/addr", "10.0.0.1:5000");
//   std::string peer = store->get("rank1/addr");   // blocks until set
//   int64_t arrived = store->add("barrier", 1);    // atomic counter
//
// Implementations: TcpStore (client of StoreServer / torch's TCPStore),
// FileStore (a file on a shared filesystem), HashStore (in process) and
// PrefixStore (a namespace inside another store).
//
// Values are byte strings held in std::string (binary safe: embedded NULs
// are kept). Every implementation is safe to call from several threads.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ccrun::store {

// The timeout of blocking operations when the caller gives none (torch's
// default for its stores is 300 s too).
inline constexpr std::chrono::milliseconds kDefaultStoreTimeout{300'000};

// The wall clock of the store's host against this host's, from one round
// trip (Cristian's algorithm): the server read its clock at some moment
// within the round trip, taken to be the midpoint, so `offset` is known to
// within +-rtt/2.
struct ClockReading {
  std::chrono::microseconds offset{0};  // the store host's clock minus this host's
  std::chrono::microseconds rtt{0};
};

class Store {
 public:
  explicit Store(std::chrono::milliseconds timeout = kDefaultStoreTimeout)
      : timeout_ms_(timeout.count()) {}
  virtual ~Store() = default;
  Store(const Store&) = delete;  // a store owns connections, files or locks
  Store& operator=(const Store&) = delete;

  // Stores `value` under `key`, replacing any earlier value, and wakes every
  // waiter on `key`.
  virtual void set(const std::string& key, const std::string& value) = 0;

  // Returns the value of `key`, blocking until the key exists or timeout()
  // passes (then TimeoutError naming the key).
  [[nodiscard]] virtual std::string get(const std::string& key) = 0;

  // Atomically adds `delta` to the int64 counter `key` (created at 0; the
  // value is kept as decimal text, like torch) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  // If the value of `key` equals `expected`, replaces it by `desired`. A
  // missing key with an empty `expected` is created with `desired`. Returns
  // the value now stored (`expected` itself when the key is missing and
  // `expected` is not empty, as torch does).
  virtual std::string compare_set(const std::string& key,
                                  const std::string& expected,
                                  const std::string& desired) = 0;

  // True when every key exists. Never blocks.
  [[nodiscard]] virtual bool check(const std::vector<std::string>& keys) = 0;

  // Blocks until every key exists; TimeoutError after `timeout`.
  virtual void wait(const std::vector<std::string>& keys,
                    std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }

  // Removes `key`; returns whether it existed.
  virtual bool delete_key(const std::string& key) = 0;

  // Number of keys in the store (for a PrefixStore: of the whole store).
  [[nodiscard]] virtual int64_t num_keys() = 0;

  // Appends `value` to the value of `key` (created when missing).
  virtual void append(const std::string& key, const std::string& value) = 0;

  // get() of each key in order, with one deadline for all.
  [[nodiscard]] virtual std::vector<std::string> multi_get(
      const std::vector<std::string>& keys) = 0;

  // set() of each pair in order. `keys` and `values` have the same length.
  virtual void multi_set(const std::vector<std::string>& keys,
                         const std::vector<std::string>& values) = 0;

  // Round trip to the store; returns the time it took. Local stores return 0.
  virtual std::chrono::microseconds ping() { return {}; }

  // The store host's clock against this one's (see ClockReading); nullopt
  // when this store cannot tell its host's time (only ccrun's TCP store
  // server answers it, on the torch 2.x dialect). Throws as ping() does.
  virtual std::optional<ClockReading> read_clock() { return std::nullopt; }

  // The local address this process reaches the store from: the address
  // other nodes can reach this one on (MASTER_ADDR, Gloo's interface).
  // Empty for stores without a connection (in-process, file).
  virtual std::string local_address() { return {}; }

  // The timeout of get(), multi_get() and wait(keys).
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(timeout_ms_.load());
  }
  void set_timeout(std::chrono::milliseconds timeout) {
    timeout_ms_.store(timeout.count());
  }

 private:
  std::atomic<int64_t> timeout_ms_;  // read by every thread that blocks
};

// The value of counter `key` as add() keeps it: a decimal int64, "" = 0.
// Throws ccrun::Error naming the key when `value` is not a number.
[[nodiscard]] int64_t parse_counter(const std::string& key, const std::string& value);

// Sets `key` to what `change` makes of its value ("" when it is missing),
// with compare_set, reading and trying again while other writers change it
// meanwhile: the read-modify-write that a list shared in the store is kept
// by. `change` runs once a try and returns nullopt to leave the key as it
// is. Returns the value written, or nullopt when `change` declined. A writer
// knows its write by the value compare_set returns, so two writers that
// would write the same text cannot tell the other's write from their own:
// put something of the writer's own in the text where that matters.
std::optional<std::string> update_by_compare_set(
    Store& store, const std::string& key,
    const std::function<std::optional<std::string>(const std::string& current)>& change);

}  // namespace ccrun::store
