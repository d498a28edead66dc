// The steps time series (agent/step_series.h): which samples are kept, and
// the line each becomes.
#include "step_series.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using ccrun::RankView;
using ccrun::agent::step_line;
using ccrun::agent::StepThinning;

TEST_CASE("a sample a second at first, the first of each attempt always") {
  StepThinning t;
  CHECK(t.take(10'000, 0));
  CHECK_FALSE(t.take(10'500, 0));
  CHECK(t.take(10'950, 0));  // a timer a little early still counts
  CHECK(t.take(11'200, 1));  // a new attempt: kept at once
  CHECK(t.take(12'200, 1));
}

TEST_CASE("the period doubles every 1,000 lines, up to 64 s") {
  StepThinning t;
  int64_t now = 0;
  int64_t kept = 0;
  // A day of samples a second.
  for (int s = 0; s < 86'400; ++s, now += 1'000) kept += t.take(now, 0) ? 1 : 0;
  CHECK(t.period_ms() == StepThinning::kLongestPeriodMs);
  CHECK(kept > 6'000);
  CHECK(kept < 7'000);
}

TEST_CASE("a line holds each local rank's steps and own time per step, -1 for one that reports none") {
  RankView a, b;
  a.reporting = true, a.steps = 120, a.busy_ms_per_step = 20.14;
  b.reporting = false, b.busy_ms_per_step = 3;
  std::string line = step_line(1'764'150'000'123, 1, 2, 16, {a, b});
  REQUIRE(line.back() == '\n');
  auto j = nlohmann::json::parse(line);
  CHECK(j["time_ms"] == 1'764'150'000'123);
  CHECK(j["attempt"] == 1);
  CHECK(j["node"] == 2);
  CHECK(j["first_rank"] == 16);
  CHECK(j["steps"] == nlohmann::json::array({120, -1}));
  CHECK(j["busy_ms"] == nlohmann::json::array({20.1, -1}));
}
