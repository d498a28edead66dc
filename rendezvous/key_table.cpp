// The store server's key-value data and parked waiters (see key_table.h).
#include "key_table.h"

#include <charconv>

namespace ccrun::rendezvous {

const std::string* KeyTable::find(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

void KeyTable::set(const std::string& key, std::string value) {
  auto [it, inserted] = data_.try_emplace(key);
  it->second = std::move(value);
  // Waiters only park on missing keys: an existing key has none to wake.
  if (inserted) wake(key);
}

bool KeyTable::add(const std::string& key, int64_t delta, int64_t& result) {
  auto [it, inserted] = data_.try_emplace(key);
  int64_t current = 0;
  const std::string& v = it->second;
  if (!v.empty()) {
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), current);
    if (ec != std::errc() || ptr != v.data() + v.size()) return false;
  }
  result = current + delta;
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, result);
  it->second.assign(buf, end);
  if (inserted) wake(key);
  return true;
}

void KeyTable::append(const std::string& key, const std::string& value) {
  auto [it, inserted] = data_.try_emplace(key);
  it->second += value;
  if (inserted) wake(key);
}

bool KeyTable::erase(const std::string& key) { return data_.erase(key) > 0; }

bool KeyTable::park(const std::shared_ptr<KeyWaiter>& waiter,
                    const std::vector<std::string>& keys) {
  size_t missing = 0;
  for (const auto& k : keys) {
    if (!data_.count(k)) ++missing;
  }
  if (missing == 0) return true;
  waiter->missing = missing;
  waiter->parked.clear();
  for (const auto& k : keys) {
    if (data_.count(k)) continue;
    auto [it, created] = waiting_.try_emplace(k);
    WaitList& list = it->second;
    if (created) list.epoch = next_epoch_++;
    // Drop cancelled entries once they are most of the list, so a client
    // that waits and cancels in a loop cannot grow it without bound.
    if (list.cancelled >= 16 && 2 * list.cancelled > list.waiters.size()) {
      std::erase_if(list.waiters, [](const auto& w) { return w->cancelled; });
      list.cancelled = 0;
    }
    list.waiters.push_back(waiter);
    waiter->parked.emplace_back(k, list.epoch);
  }
  return false;
}

void KeyTable::cancel(const std::shared_ptr<KeyWaiter>& waiter) {
  if (waiter->cancelled || waiter->missing == 0) return;
  waiter->cancelled = true;
  waiter->on_ready = nullptr;
  for (const auto& [key, epoch] : waiter->parked) {
    auto it = waiting_.find(key);
    if (it == waiting_.end() || it->second.epoch != epoch) continue;
    WaitList& list = it->second;
    if (++list.cancelled == list.waiters.size()) waiting_.erase(it);
  }
  waiter->parked.clear();
}

void KeyTable::wake(const std::string& key) {
  auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  // Move the list out first: a woken waiter may set keys (and so touch
  // waiting_) before we are done.
  std::vector<std::shared_ptr<KeyWaiter>> woken = std::move(it->second.waiters);
  waiting_.erase(it);
  for (const auto& w : woken) {
    if (w->cancelled || w->missing == 0) continue;
    if (--w->missing == 0 && w->on_ready) {
      auto ready = std::move(w->on_ready);
      ready();
    }
  }
}

}  // namespace ccrun::rendezvous
