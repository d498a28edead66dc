//===- store_util.h - Helpers shared by the Store implementations -*- C++ -*-=//
//
// The compare_set and counter rules, and timeout messages, so that every
// store behaves the same and says the same thing in the same words.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ccrun/error.h"  // format_duration

namespace ccrun::store {

// The rules every store applies, written once (the server's key table,
// HashStore and FileStore call these; EtcdStore maps them onto etcd
// transactions).

// compare_set(key, expected, desired), torch's rule. `current` is the key's
// value, nullptr when the key is missing. The key is written with `desired`
// when it is missing and `expected` is "", or when it holds `expected`.
[[nodiscard]] bool compare_set_writes(const std::string* current, const std::string& expected);
// What compare_set returns: `desired` when it wrote, else the value the key
// keeps (`expected` itself for a missing key, as torch's stores answer).
[[nodiscard]] const std::string& compare_set_reply(const std::string* current,
                                                   const std::string& expected,
                                                   const std::string& desired);

// add(key, delta): a counter is a decimal int64 ("" or missing = 0).
enum class CounterResult {
  kOk,
  kNotCounter,  // the value is not a decimal int64
  kOverflow,    // value + delta is outside int64 (never wraps)
};
// On kOk `result` is the new value; on kOverflow the value read.
[[nodiscard]] CounterResult add_to_counter(std::string_view value, int64_t delta,
                                           int64_t& result);
// add_to_counter for the stores that throw: ccrun::Error naming the key.
int64_t add_or_throw(const std::string& key, std::string_view value, int64_t delta);

// parse_counter (the counter rule, for callers of get()) is in ccrun/store.h.

// format_duration (a duration as messages spell it) is in ccrun/error.h.

// `"a", "b"` (at most a few keys, then "and N more").
std::string quote_keys(const std::vector<std::string>& keys);

}  // namespace ccrun::store
