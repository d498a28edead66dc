// PrefixStore: a key namespace inside another store (see
// include/ccrun/prefix_store.h). The underlying store's timeout is synced to
// this one's on every blocking call.
#include "ccrun/prefix_store.h"

namespace ccrun::store {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : Store(store->timeout()), prefix_(std::move(prefix)), store_(std::move(store)) {}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value) {
  store_->set(full(key), value);
}

std::string PrefixStore::get(const std::string& key) {
  auto values = multi_get({key});
  return std::move(values[0]);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return store_->add(full(key), delta);
}

std::string PrefixStore::compare_set(const std::string& key,
                                     const std::string& expected,
                                     const std::string& desired) {
  return store_->compare_set(full(key), expected, desired);
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  return store_->check(full(keys));
}

void PrefixStore::wait(const std::vector<std::string>& keys,
                       std::chrono::milliseconds timeout) {
  store_->wait(full(keys), timeout);
}

bool PrefixStore::delete_key(const std::string& key) {
  return store_->delete_key(full(key));
}

int64_t PrefixStore::num_keys() { return store_->num_keys(); }

void PrefixStore::append(const std::string& key, const std::string& value) {
  store_->append(full(key), value);
}

std::vector<std::string> PrefixStore::multi_get(
    const std::vector<std::string>& keys) {
  // Blocking reads use this store's timeout, whatever the underlying one's.
  auto full_keys = full(keys);
  store_->wait(full_keys, timeout());
  return store_->multi_get(full_keys);
}

void PrefixStore::multi_set(const std::vector<std::string>& keys,
                            const std::vector<std::string>& values) {
  store_->multi_set(full(keys), values);
}

}  // namespace ccrun::store
