//===- ccrun/hash_store.h - A Store inside one process ----------*- C++ -*-===//
//
// `HashStore` keeps its keys in memory. Threads of one process share it: the
// usual way to test code that talks to a Store, and the backing of ranks that
// run as threads.
//
//   auto store = std::make_shared<HashStore>();
//   std::thread t([&] { store->set("k", "v"); });
//   std::string v = store->get("k");   // blocks until the thread has set it
//
//===----------------------------------------------------------------------===//
#pragma once

#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "ccrun/store.h"

namespace ccrun::store {

class HashStore : public Store {
 public:
  explicit HashStore(std::chrono::milliseconds timeout = kDefaultStoreTimeout)
      : Store(timeout) {}

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

 private:
  // Blocks until every key exists or `deadline`; caller holds `lock`.
  void wait_locked(std::unique_lock<std::mutex>& lock,
                   const std::vector<std::string>& keys,
                   std::chrono::steady_clock::time_point deadline,
                   std::chrono::milliseconds timeout);

  std::mutex mu_;
  std::condition_variable changed_;  // notified on every insertion
  std::unordered_map<std::string, std::string> map_;  // guarded by mu_
};

}  // namespace ccrun::store
