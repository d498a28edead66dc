// ccrun's own verbosity: CCRUN_LOG_LEVEL before LOGLEVEL, Python's names and
// numbers for LOGLEVEL, an error for a bad CCRUN_LOG_LEVEL, a warning for a
// bad LOGLEVEL.
#include "log_level.h"

#include <catch2/catch.hpp>

#include "ccrun/error.h"

using ccrun::launcher::choose_log_level;
using spdlog::level::level_enum;

TEST_CASE("neither variable keeps info", "[log_level]") {
  CHECK(choose_log_level(nullptr, nullptr).level == level_enum::info);
  CHECK(choose_log_level("", "").level == level_enum::info);
}

TEST_CASE("LOGLEVEL takes Python logging's names and numbers", "[log_level]") {
  CHECK(choose_log_level(nullptr, "DEBUG").level == level_enum::debug);
  CHECK(choose_log_level(nullptr, "INFO").level == level_enum::info);
  CHECK(choose_log_level(nullptr, "WARNING").level == level_enum::warn);
  CHECK(choose_log_level(nullptr, "warn").level == level_enum::warn);
  CHECK(choose_log_level(nullptr, "ERROR").level == level_enum::err);
  CHECK(choose_log_level(nullptr, "CRITICAL").level == level_enum::critical);
  CHECK(choose_log_level(nullptr, "FATAL").level == level_enum::critical);
  CHECK(choose_log_level(nullptr, "NOTSET").level == level_enum::debug);
  CHECK(choose_log_level(nullptr, "30").level == level_enum::warn);
  CHECK(choose_log_level(nullptr, "25").level == level_enum::warn);
  CHECK(choose_log_level(nullptr, "50").level == level_enum::critical);
  CHECK(choose_log_level(nullptr, "WARNING").warning.empty());
}

TEST_CASE("a LOGLEVEL ccrun cannot read is a warning, not an error", "[log_level]") {
  for (const char* bad : {"verbose", "trace", "-5", "3x"}) {
    auto c = choose_log_level(nullptr, bad);
    CHECK(c.level == level_enum::info);
    CHECK_THAT(c.warning, Catch::Contains(std::string("LOGLEVEL=\"") + bad + "\"") &&
                              Catch::Contains("WARNING"));
  }
}

TEST_CASE("CCRUN_LOG_LEVEL wins, and a bad one is an error naming the choices", "[log_level]") {
  CHECK(choose_log_level("debug", "ERROR").level == level_enum::debug);
  CHECK(choose_log_level("trace", nullptr).level == level_enum::trace);
  CHECK(choose_log_level("off", nullptr).level == level_enum::off);
  CHECK_THROWS_WITH(choose_log_level("loud", "INFO"),
                    Catch::Contains("CCRUN_LOG_LEVEL=\"loud\"") && Catch::Contains("trace, debug"));
}
