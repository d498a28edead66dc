// ccrun's own verbosity from CCRUN_LOG_LEVEL or LOGLEVEL (see log_level.h).
#include "log_level.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <optional>
#include <utility>

#include "ccrun/error.h"

namespace ccrun::launcher {
namespace {

using spdlog::level::level_enum;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::optional<level_enum> spdlog_level(const std::string& text) {
  static constexpr std::array<std::pair<const char*, level_enum>, 9> kNames{{
      {"trace", level_enum::trace}, {"debug", level_enum::debug}, {"info", level_enum::info},
      {"warn", level_enum::warn}, {"warning", level_enum::warn}, {"error", level_enum::err},
      {"err", level_enum::err}, {"critical", level_enum::critical}, {"off", level_enum::off}}};
  std::string t = lower(text);
  for (const auto& [name, level] : kNames) {
    if (t == name) return level;
  }
  return std::nullopt;
}

// Python logging's levels: a name, or a number (10 DEBUG ... 50 CRITICAL;
// between two, the lower's messages are shown, as Python compares them).
std::optional<level_enum> python_level(const std::string& text) {
  int n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec == std::errc() && end == text.data() + text.size() && n >= 0) {
    if (n <= 10) return level_enum::debug;
    if (n <= 20) return level_enum::info;
    if (n <= 30) return level_enum::warn;
    if (n <= 40) return level_enum::err;
    return level_enum::critical;
  }
  std::string t = lower(text);
  if (t == "notset") return level_enum::debug;
  if (t == "fatal") return level_enum::critical;
  if (t == "trace" || t == "off" || t == "err") return std::nullopt;  // not Python's names
  return spdlog_level(t);
}

}  // namespace

LogLevelChoice choose_log_level(const char* ccrun_log_level, const char* loglevel) {
  LogLevelChoice c;
  if (ccrun_log_level && *ccrun_log_level) {
    auto level = spdlog_level(ccrun_log_level);
    if (!level) {
      throw ConfigError(std::string("CCRUN_LOG_LEVEL=\"") + ccrun_log_level +
                        "\": not a level; use trace, debug, info, warn, error, critical or off");
    }
    c.level = *level;
  } else if (loglevel && *loglevel) {
    if (auto level = python_level(loglevel)) {
      c.level = *level;
    } else {
      c.warning = std::string("LOGLEVEL=\"") + loglevel +
                  "\" is not a Python logging level (DEBUG, INFO, WARNING, ERROR, CRITICAL or "
                  "10-50); ccrun keeps its default, info";
    }
  }
  return c;
}

}  // namespace ccrun::launcher
