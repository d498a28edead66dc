//===- key_table.h - The store server's keys and parked waiters -*- C++ -*-===//
//
// `KeyTable` holds the server's key-value data, its queues (torch 2.x's
// QUEUE_PUSH/QUEUE_POP: a FIFO of byte strings per key, apart from the
// values) and the clients parked on keys that are not present yet. A key is
// present when it has a value or a non-empty queue. Setting a key wakes
// exactly the waiters of that key, pushing onto its queue wakes one of them
// (O(waiters of the key), never a scan of all clients). Used from the
// server's one thread only: no locking.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ccrun::store {

// One parked request: how many of its keys are still missing, and what to do
// when none is. Cancelled waiters stay in the lists until compacted or woken.
struct KeyWaiter {
  size_t missing = 0;
  bool cancelled = false;
  std::function<void()> on_ready;  // called once, when missing reaches 0
  // The lists it sits in: (key, epoch of that key's list when parked); epoch
  // 0 marks an entry already taken off its list by a queue push.
  std::vector<std::pair<std::string, uint64_t>> parked;
};

class KeyTable {
 public:
  // Called after every write (set, add, append, queue push) with its key.
  std::function<void(const std::string&)> on_write;

  // The value of `key`, or nullptr.
  const std::string* find(const std::string& key) const;

  // Whether `key` has a value or a non-empty queue (what WAIT and CHECK see).
  bool present(const std::string& key) const;

  // Stores the value and wakes the waiters of `key`.
  void set(const std::string& key, std::string value);

  enum class AddResult {
    kOk,
    kNotCounter,  // the value is not a decimal int64
    kOverflow,    // value + delta is outside int64
  };
  // Adds to the decimal counter at `key` (created at 0). Anything but kOk
  // leaves the key as it was; on kOverflow `result` holds the value read.
  AddResult add(const std::string& key, int64_t delta, int64_t& result);

  // Appends to the value of `key` (created when missing) and wakes waiters.
  void append(const std::string& key, const std::string& value);

  // Removes `key`'s value (not its queue); returns whether it existed.
  bool erase(const std::string& key);

  // Removes every value and queue whose key begins with `prefix` (not empty);
  // returns how many keys lost their value. O(keys stored).
  size_t erase_prefix(std::string_view prefix);
  // Removes every value and queue whose key does not begin with `keep`;
  // returns how many keys lost their value. O(keys stored).
  size_t erase_if_not_prefix(std::string_view keep);

  // Keys with a value (torch's GETNUMKEYS: queues are not counted).
  size_t size() const { return data_.size(); }
  // Calls `f` with each key that has a value (torch's LIST), in no order.
  template <typename F>
  void for_each_key(F&& f) const {
    for (const auto& [key, value] : data_) f(key);
  }

  // Appends to `key`'s queue and wakes one waiter of `key`.
  void queue_push(const std::string& key, std::string value);

  // Pops the front of `key`'s queue: nullopt when it is empty. `length` is
  // the queue's length before the pop (torch's QUEUE_POP reply).
  std::optional<std::string> queue_pop(const std::string& key, size_t& length);

  size_t queue_length(const std::string& key) const;

  // Parks `waiter` on the ones of `keys` not present, moving those keys
  // into the waiter (no copies: a WAIT of a million keys costs their parse
  // and one list entry each). Returns true (and parks nothing, moves
  // nothing) when every key is present already.
  bool park(const std::shared_ptr<KeyWaiter>& waiter, std::vector<std::string>& keys);

  // Cancels a parked waiter; it will never be called. O(its keys).
  void cancel(const std::shared_ptr<KeyWaiter>& waiter);

 private:
  // The waiters of one key, oldest first, from `head` on (a vector, not a
  // deque: an empty std::deque already allocates about 600 bytes, and a WAIT
  // may create a list for each of a million keys).
  struct WaitList {
    std::vector<std::shared_ptr<KeyWaiter>> waiters;
    size_t head = 0;       // entries before it were taken by queue pushes
    size_t cancelled = 0;  // entries (from head on) of cancelled waiters
    uint64_t epoch = 0;    // tells this list from a later one of the key
    size_t size() const { return waiters.size() - head; }
  };

  // Wakes every waiter of `key`.
  void wake(const std::string& key);
  // Takes waiters of `key` off its list, oldest first, until one of them has
  // no key missing any more, and wakes that one.
  void wake_one(const std::string& key);

  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::unordered_map<std::string, WaitList> waiting_;  // key -> parked
  uint64_t next_epoch_ = 1;
};

}  // namespace ccrun::store
