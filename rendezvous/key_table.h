//===- key_table.h - The store server's keys and parked waiters -*- C++ -*-===//
//
// `KeyTable` holds the server's key-value data and the clients parked on
// keys that do not exist yet. Setting a key wakes exactly the waiters of that
// key (O(waiters of the key), never a scan of all clients). Used from the
// server's one thread only: no locking.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace ccrun::rendezvous {

// One parked request: how many of its keys are still missing, and what to do
// when none is. Cancelled waiters stay in the lists until compacted or woken.
struct KeyWaiter {
  size_t missing = 0;
  bool cancelled = false;
  std::function<void()> on_ready;  // called once, when missing reaches 0
  // The lists it sits in: (key, epoch of that key's list when parked).
  std::vector<std::pair<std::string, uint64_t>> parked;
};

class KeyTable {
 public:
  // The value of `key`, or nullptr.
  const std::string* find(const std::string& key) const;

  // Stores the value and wakes the waiters of `key`.
  void set(const std::string& key, std::string value);

  // Adds to the decimal counter at `key` (created at 0). Returns false and
  // leaves the key alone when its value is not a counter.
  bool add(const std::string& key, int64_t delta, int64_t& result);

  // Appends to the value of `key` (created when missing) and wakes waiters.
  void append(const std::string& key, const std::string& value);

  // Removes `key`; returns whether it existed.
  bool erase(const std::string& key);

  size_t size() const { return data_.size(); }

  // Parks `waiter` on the missing ones of `keys`. Returns true (and parks
  // nothing) when every key exists already.
  bool park(const std::shared_ptr<KeyWaiter>& waiter,
            const std::vector<std::string>& keys);

  // Cancels a parked waiter; it will never be called. O(its keys).
  void cancel(const std::shared_ptr<KeyWaiter>& waiter);

 private:
  struct WaitList {
    std::vector<std::shared_ptr<KeyWaiter>> waiters;
    size_t cancelled = 0;  // entries of cancelled waiters
    uint64_t epoch = 0;    // tells this list from a later one of the key
  };

  void wake(const std::string& key);

  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<std::string, WaitList> waiting_;  // key -> parked
  uint64_t next_epoch_ = 1;
};

}  // namespace ccrun::rendezvous
