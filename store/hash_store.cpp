// HashStore: the in-process Store (see include/ccrun/hash_store.h).
#include "ccrun/hash_store.h"

#include "ccrun/error.h"
#include "store_util.h"

namespace ccrun::store {

void HashStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(mu_);
    map_[key] = value;
  }
  changed_.notify_all();
}

std::string HashStore::get(const std::string& key) {
  auto t = timeout();
  std::unique_lock lock(mu_);
  wait_locked(lock, {key}, std::chrono::steady_clock::now() + t, t);
  return map_.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t value;
  {
    std::lock_guard lock(mu_);
    auto& slot = map_[key];
    value = add_or_throw(key, slot, delta);
    slot = std::to_string(value);
  }
  changed_.notify_all();
  return value;
}

std::string HashStore::compare_set(const std::string& key,
                                   const std::string& expected,
                                   const std::string& desired) {
  std::string reply;
  {
    std::lock_guard lock(mu_);
    auto it = map_.find(key);
    const std::string* now = it == map_.end() ? nullptr : &it->second;
    reply = compare_set_reply(now, expected, desired);
    if (!compare_set_writes(now, expected)) return reply;
    map_[key] = desired;
  }
  changed_.notify_all();
  return reply;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  for (const auto& k : keys) {
    if (!map_.count(k)) return false;
  }
  return true;
}

void HashStore::wait(const std::vector<std::string>& keys,
                     std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  wait_locked(lock, keys, std::chrono::steady_clock::now() + timeout, timeout);
}

void HashStore::wait_locked(std::unique_lock<std::mutex>& lock,
                            const std::vector<std::string>& keys,
                            std::chrono::steady_clock::time_point deadline,
                            std::chrono::milliseconds timeout) {
  auto all_present = [&] {
    for (const auto& k : keys) {
      if (!map_.count(k)) return false;
    }
    return true;
  };
  if (!changed_.wait_until(lock, deadline, all_present)) {
    throw TimeoutError("hash store: timed out after " +
                       format_duration(timeout) + " waiting for key(s) " +
                       quote_keys(keys));
  }
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard lock(mu_);
  return map_.erase(key) > 0;
}

int64_t HashStore::num_keys() {
  std::lock_guard lock(mu_);
  return static_cast<int64_t>(map_.size());
}

void HashStore::append(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(mu_);
    map_[key] += value;
  }
  changed_.notify_all();
}

std::vector<std::string> HashStore::multi_get(
    const std::vector<std::string>& keys) {
  auto t = timeout();
  std::unique_lock lock(mu_);
  wait_locked(lock, keys, std::chrono::steady_clock::now() + t, t);
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& k : keys) values.push_back(map_.at(k));
  return values;
}

void HashStore::multi_set(const std::vector<std::string>& keys,
                          const std::vector<std::string>& values) {
  if (keys.size() != values.size()) {
    throw Error("hash store: multi_set got " + std::to_string(keys.size()) +
                " keys and " + std::to_string(values.size()) +
                " values; pass one value per key");
  }
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < keys.size(); ++i) map_[keys[i]] = values[i];
  }
  changed_.notify_all();
}

}  // namespace ccrun::store
