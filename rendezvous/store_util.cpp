// Helpers shared by the Store implementations (see store_util.h).
#include "store_util.h"

#include <charconv>
#include <cstdio>

#include "ccrun/error.h"

namespace ccrun::rendezvous {

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

std::string format_duration(std::chrono::milliseconds d) {
  using namespace std::chrono;
  auto ms = d.count();
  if (ms < 1000) return std::to_string(ms) + "ms";
  if (ms % 1000 != 0 && ms < 10'000) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1fs", ms / 1000.0);
    return buf;
  }
  auto s = ms / 1000;
  if (s < 120) return std::to_string(s) + "s";
  std::string out = std::to_string(s / 60) + "m";
  if (s % 60) out += std::to_string(s % 60) + "s";
  return out;
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

}  // namespace ccrun::rendezvous
