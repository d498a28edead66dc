//===- ccrun/prefix_store.h - A namespace inside another Store --*- C++ -*-===//
//
// `PrefixStore` puts every key under "<prefix>/" in an underlying store, so
// one store can serve one job, one attempt and one process group apart:
//
//   auto attempt = std::make_shared<PrefixStore>("ccrun/job7/attempt_1", store);
//   attempt->set("rank0", addr);          // stored as "ccrun/job7/attempt_1/rank0"
//
// num_keys() counts the underlying store's keys, as torch's PrefixStore does.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <memory>

#include "ccrun/store.h"

namespace ccrun::store {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);

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
  std::chrono::microseconds ping() override { return store_->ping(); }
  std::optional<ClockReading> read_clock() override { return store_->read_clock(); }
  std::string local_address() override { return store_->local_address(); }

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& underlying() const { return store_; }

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace ccrun::store
