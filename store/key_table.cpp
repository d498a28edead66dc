// The store server's key-value data, queues and parked waiters (see
// key_table.h).
#include "key_table.h"

#include "store_util.h"

#include <charconv>

namespace ccrun::store {

const std::string* KeyTable::find(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

bool KeyTable::present(const std::string& key) const {
  if (data_.count(key)) return true;
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

void KeyTable::set(const std::string& key, std::string value) {
  auto [it, inserted] = data_.try_emplace(key);
  it->second = std::move(value);
  if (on_write) on_write(key);
  // Waiters only park on keys not present: a key with a value has none.
  if (inserted) wake(key);
}

KeyTable::AddResult KeyTable::add(const std::string& key, int64_t delta,
                                  int64_t& result) {
  auto it = data_.find(key);
  switch (add_to_counter(it == data_.end() ? std::string_view() : std::string_view(it->second),
                         delta, result)) {
    case CounterResult::kNotCounter:
      return AddResult::kNotCounter;
    case CounterResult::kOverflow:
      return AddResult::kOverflow;
    case CounterResult::kOk:
      break;
  }
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, result);
  bool inserted = it == data_.end();
  if (inserted) it = data_.try_emplace(key).first;
  it->second.assign(buf, end);
  if (on_write) on_write(key);
  if (inserted) wake(key);
  return AddResult::kOk;
}

void KeyTable::append(const std::string& key, const std::string& value) {
  auto [it, inserted] = data_.try_emplace(key);
  it->second += value;
  if (on_write) on_write(key);
  if (inserted) wake(key);
}

bool KeyTable::erase(const std::string& key) { return data_.erase(key) > 0; }

size_t KeyTable::erase_prefix(std::string_view prefix) {
  if (prefix.empty()) return 0;
  auto starts = [prefix](const std::string& k) { return k.starts_with(prefix); };
  size_t erased = std::erase_if(data_, [&](const auto& kv) { return starts(kv.first); });
  std::erase_if(queues_, [&](const auto& kv) { return starts(kv.first); });
  return erased;
}

size_t KeyTable::erase_if_not_prefix(std::string_view keep) {
  auto other = [keep](const std::string& k) { return !k.starts_with(keep); };
  size_t erased = std::erase_if(data_, [&](const auto& kv) { return other(kv.first); });
  std::erase_if(queues_, [&](const auto& kv) { return other(kv.first); });
  return erased;
}

void KeyTable::queue_push(const std::string& key, std::string value) {
  queues_[key].push_back(std::move(value));
  if (on_write) on_write(key);
  wake_one(key);
}

std::optional<std::string> KeyTable::queue_pop(const std::string& key,
                                               size_t& length) {
  auto it = queues_.find(key);
  if (it == queues_.end()) {
    length = 0;
    return std::nullopt;
  }
  length = it->second.size();
  std::string value = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queues_.erase(it);  // a pop of a stranger key costs nothing
  return value;
}

size_t KeyTable::queue_length(const std::string& key) const {
  auto it = queues_.find(key);
  return it == queues_.end() ? 0 : it->second.size();
}

bool KeyTable::park(const std::shared_ptr<KeyWaiter>& waiter,
                    std::vector<std::string>& keys) {
  size_t missing = 0;
  for (const auto& k : keys) {
    if (!present(k)) ++missing;
  }
  if (missing == 0) return true;
  waiter->missing = missing;
  waiter->parked.clear();
  waiter->parked.reserve(missing);
  for (auto& k : keys) {
    if (present(k)) continue;
    auto [it, created] = waiting_.try_emplace(k);
    WaitList& list = it->second;
    if (created) list.epoch = next_epoch_++;
    // Drop cancelled entries once they are most of the list, so a client
    // that waits and cancels in a loop cannot grow it without bound.
    if (list.cancelled >= 16 && 2 * list.cancelled > list.size()) {
      list.waiters.erase(list.waiters.begin(),
                         list.waiters.begin() + static_cast<std::ptrdiff_t>(list.head));
      list.head = 0;
      std::erase_if(list.waiters, [](const auto& w) { return w->cancelled; });
      list.cancelled = 0;
    }
    list.waiters.push_back(waiter);
    waiter->parked.emplace_back(std::move(k), list.epoch);
  }
  return false;
}

void KeyTable::cancel(const std::shared_ptr<KeyWaiter>& waiter) {
  if (waiter->cancelled || waiter->missing == 0) return;
  waiter->cancelled = true;
  waiter->on_ready = nullptr;
  for (const auto& [key, epoch] : waiter->parked) {
    if (epoch == 0) continue;  // already off that list
    auto it = waiting_.find(key);
    if (it == waiting_.end() || it->second.epoch != epoch) continue;
    WaitList& list = it->second;
    if (++list.cancelled == list.size()) waiting_.erase(it);
  }
  waiter->parked.clear();
}

void KeyTable::wake(const std::string& key) {
  auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  // Move the list out first: a woken waiter may set keys or close sessions
  // (and so touch waiting_) before we are done.
  WaitList woken = std::move(it->second);
  waiting_.erase(it);
  for (size_t i = woken.head; i < woken.waiters.size(); ++i) {
    const auto& w = woken.waiters[i];
    if (w->cancelled || w->missing == 0) continue;
    if (--w->missing == 0 && w->on_ready) {
      auto ready = std::move(w->on_ready);
      ready();
    }
  }
}

void KeyTable::wake_one(const std::string& key) {
  auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  WaitList& list = it->second;
  std::shared_ptr<KeyWaiter> ready;
  while (!ready && list.head < list.waiters.size()) {
    std::shared_ptr<KeyWaiter> w = std::move(list.waiters[list.head++]);
    if (w->cancelled) {
      --list.cancelled;
      continue;
    }
    if (w->missing == 0) continue;
    // It leaves this key's list: a later cancel() must not count it here.
    for (auto& entry : w->parked) {
      if (entry.second == list.epoch && entry.first == key) {
        entry.second = 0;
        break;
      }
    }
    if (--w->missing == 0) ready = std::move(w);
  }
  if (list.size() == 0) {
    waiting_.erase(it);
  } else if (list.head > 16 && 2 * list.head > list.waiters.size()) {
    list.waiters.erase(list.waiters.begin(),
                       list.waiters.begin() + static_cast<std::ptrdiff_t>(list.head));
    list.head = 0;
  }
  // Called last: the callback may touch waiting_.
  if (ready && ready->on_ready) {
    auto on_ready = std::move(ready->on_ready);
    on_ready();
  }
}

}  // namespace ccrun::store
