//===- store_util.h - Helpers shared by the Store implementations -*- C++ -*-=//
//
// Counter parsing and timeout messages, so that every store says the same
// thing in the same words.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ccrun::rendezvous {

// Parses the decimal int64 value of counter `key` (empty = 0). Throws
// ccrun::Error naming the key when the value is not a number.
int64_t parse_counter(const std::string& key, const std::string& value);

// "3s", "250ms", "2m30s": a duration as people read it in messages.
std::string format_duration(std::chrono::milliseconds d);

// `"a", "b"` (at most a few keys, then "and N more").
std::string quote_keys(const std::vector<std::string>& keys);

}  // namespace ccrun::rendezvous
