//===- log_level.h - How much ccrun itself says on stderr -------*- C++ -*-===//
//
// Two variables set ccrun's own verbosity: CCRUN_LOG_LEVEL (spdlog's names:
// trace, debug, info, warn, error, critical, off) and, for torchrun users,
// LOGLEVEL (Python logging's names, as torch's elastic logger reads it:
// DEBUG, INFO, WARNING, ERROR, CRITICAL, or their numbers 10-50). The first
// wins; neither set keeps ccrun's default, info (torchrun's is WARNING: ccrun
// prints its one-line summaries). The decision is a pure function so a unit
// test can drive it:
//
//   LogLevelChoice c = choose_log_level(nullptr, "WARNING");
//   // c.level == spdlog::level::warn, c.warning == ""
//
// A bad CCRUN_LOG_LEVEL is an error (it is ccrun's own variable); a bad
// LOGLEVEL only a warning (other programs share the name).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <spdlog/common.h>

#include <string>

namespace ccrun::launcher {

struct LogLevelChoice {
  spdlog::level::level_enum level = spdlog::level::info;
  std::string warning;  // a LOGLEVEL ccrun could not read (ignored), or ""
};

// Throws ConfigError naming CCRUN_LOG_LEVEL's value and the names it takes.
LogLevelChoice choose_log_level(const char* ccrun_log_level, const char* loglevel);

}  // namespace ccrun::launcher
