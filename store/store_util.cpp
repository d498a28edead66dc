// Helpers shared by the Store implementations (see store_util.h).
#include "store_util.h"

#include <charconv>
#include <cstdio>

#include "ccrun/error.h"
#include "ccrun/store.h"

namespace ccrun::store {

bool compare_set_writes(const std::string* current, const std::string& expected) {
  return current ? *current == expected : expected.empty();
}

const std::string& compare_set_reply(const std::string* current, const std::string& expected,
                                     const std::string& desired) {
  if (compare_set_writes(current, expected)) return desired;
  return current ? *current : expected;
}

CounterResult add_to_counter(std::string_view value, int64_t delta, int64_t& result) {
  int64_t current = 0;
  if (!value.empty()) {
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), current);
    if (ec != std::errc() || ptr != value.data() + value.size()) return CounterResult::kNotCounter;
  }
  if (__builtin_add_overflow(current, delta, &result)) {
    result = current;
    return CounterResult::kOverflow;
  }
  return CounterResult::kOk;
}

int64_t add_or_throw(const std::string& key, std::string_view value, int64_t delta) {
  int64_t result = 0;
  switch (add_to_counter(value, delta, result)) {
    case CounterResult::kOk:
      return result;
    case CounterResult::kNotCounter:
      (void)parse_counter(key, std::string(value));  // throws, naming the key
      break;
    case CounterResult::kOverflow:
      break;
  }
  throw Error("store: add(\"" + key + "\", " + std::to_string(delta) + ") on " +
              std::to_string(result) + " would overflow int64; the value is left as it was");
}

int64_t parse_counter(const std::string& key, const std::string& value) {
  if (value.empty()) return 0;
  int64_t n = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, n);
  if (ec != std::errc() || ptr != end) {
    throw Error("store: add on key \"" + key +
                "\": its value is not an integer counter (" +
                std::to_string(value.size()) +
                " bytes); use a key that only add() touches");
  }
  return n;
}

std::optional<std::string> update_by_compare_set(
    Store& store, const std::string& key,
    const std::function<std::optional<std::string>(const std::string& current)>& change) {
  for (;;) {
    std::string before = store.check({key}) ? store.get(key) : "";
    std::optional<std::string> after = change(before);
    if (!after) return std::nullopt;
    if (store.compare_set(key, before, *after) == *after) return after;
  }
}

std::string quote_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 4;
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i) out += ", ";
    out += "\"" + keys[i] + "\"";
  }
  if (keys.size() > kShown) {
    out += " and " + std::to_string(keys.size() - kShown) + " more";
  }
  return out;
}

}  // namespace ccrun::store
