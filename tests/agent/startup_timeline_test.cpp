// The start-up timeline's one line and its JSON (ccrun/startup_timeline.h).
#include "ccrun/startup_timeline.h"

#include <catch2/catch.hpp>

#include "startup_watch.h"

using namespace ccrun::agent;
using ccrun::progress::Phase;

namespace {

// A rank spawned at `spawned_ms`, reaching the phases at these microseconds after it (-1: not).
StartupTimeline rank(int r, int64_t spawned_ms, std::array<int64_t, 5> us, bool warm = false) {
  StartupTimeline t;
  t.rank = r;
  t.spawned_ms = spawned_ms;
  t.after_spawn_us = us;
  t.warm = warm;
  return t;
}

}  // namespace

TEST_CASE("the line names the slowest rank and its phases after a failure", "[startup]") {
  StartupReference ref{1'000'000, "rank 1 failed"};
  std::vector<StartupTimeline> ranks = {
      rank(0, 1'000'030, {2'000, 2'000, 60'000, 70'000, 100'000}, true),
      rank(3, 1'000'040, {3'000, 3'000, 70'000, 80'000, 120'000}, true),
  };
  REQUIRE(seconds_to_first_step(ref, ranks) == Approx(0.16));
  REQUIRE(startup_line(1, ref, ranks) ==
          "attempt 1: every rank at its first step 0.16 s after rank 1 failed (stop 0.04, start "
          "0.003, imports 0 (warm), process group 0.07, first collective 0.01, first step 0.04; "
          "slowest rank 3)");
}

TEST_CASE("phases nothing wrote are left out, and a launch is the reference", "[startup]") {
  StartupReference ref{5'000, "launch"};
  std::vector<StartupTimeline> ranks = {rank(0, 5'010, {-1, -1, -1, -1, 20'000})};
  REQUIRE(startup_line(0, ref, ranks) ==
          "attempt 0: every rank at its first step 0.03 s after launch (until spawned 0.01, "
          "first step 0.02; slowest rank 0)");
}

TEST_CASE("seconds to the first step are unknown until every rank stepped", "[startup]") {
  StartupReference ref{0, ""};
  std::vector<StartupTimeline> ranks = {rank(0, 10, {1, 2, 3, 4, 5}),
                                        rank(1, 10, {1, 2, 3, 4, -1})};
  REQUIRE(seconds_to_first_step(ref, ranks) == -1);
  REQUIRE_FALSE(ranks[1].done());
}

TEST_CASE("a timeline goes through JSON unchanged", "[startup]") {
  StartupTimeline t = rank(7, 123, {1'000, 2'000, -1, 4'000, 5'000}, true);
  StartupTimeline back = StartupTimeline::from_json(t.to_json());
  REQUIRE(back.rank == 7);
  REQUIRE(back.spawned_ms == 123);
  REQUIRE(back.warm);
  REQUIRE(back.after_spawn_us == t.after_spawn_us);
  REQUIRE(StartupTimeline::from_json(nlohmann::json("junk")).rank == -1);
}

TEST_CASE("a record's phases before the spawn belong to another attempt", "[startup]") {
  ccrun::progress::Startup s{};
  s.at_ns[0] = 900;    // before the spawn at 1000: not this attempt's
  s.at_ns[4] = 3'000;
  s.flags = ccrun::progress::kStartedWarm;
  StartupTimeline t = read_timeline(2, 1'000, s, 0);
  REQUIRE_FALSE(t.reached(Phase::kInterpreter));
  REQUIRE(t.after_spawn_us[4] == 2);
  REQUIRE(t.warm);
}

TEST_CASE("the watch reads often while start-up is young, then less", "[startup]") {
  using std::chrono::milliseconds;
  REQUIRE(StartupWatch::interval(milliseconds(0)) == milliseconds(10));
  REQUIRE(StartupWatch::interval(milliseconds(5'000)) == milliseconds(100));
  REQUIRE(StartupWatch::interval(milliseconds(120'000)) == milliseconds(1'000));
}

TEST_CASE("a rank's start-up in a few words, for ccrun status", "[startup]") {
  REQUIRE(startup_summary(StartupTimeline{}) == "-");
  // a program without the hook reports no phase: it runs from its spawn on
  REQUIRE(startup_summary(rank(0, 10, {-1, -1, -1, -1, -1})) == "running");
  REQUIRE(startup_summary(rank(0, 10, {3'000, 1'200'000, -1, -1, -1})) == "starting: imports 1.20s");
  // collectives but no step: starting until it progresses past its first collective
  REQUIRE(startup_summary(rank(0, 10, {3'000, 1'200'000, 2'000'000, 3'670'000, -1})) ==
          "starting: first collective 3.67s");
  REQUIRE(startup_summary(rank(0, 10, {3'000, 1'200'000, 2'000'000, 3'670'000, -1}), 99) ==
          "running since first collective 3.67s");
  // steps moved before any collective (a restarted record): still starting
  REQUIRE(startup_summary(rank(0, 10, {3'000, 1'200'000, -1, -1, -1}), 90) ==
          "starting: imports 1.20s");
  REQUIRE(startup_summary(rank(0, 10, {3'000, 3'000, 60'000, 70'000, 160'000}, true)) ==
          "first step 0.16s (warm)");
}

TEST_CASE("a program without steps gets a line that ends at the phases it reached", "[startup]") {
  StartupReference ref{5'000, "launch"};
  std::vector<StartupTimeline> ranks = {rank(0, 5'010, {40'000, 1'300'000, 3'500'000, 3'640'000, -1}),
                                        rank(1, 5'010, {-1, -1, -1, -1, -1})};
  REQUIRE(past_startup(ranks[0], 12));
  REQUIRE_FALSE(past_startup(ranks[0], 0));
  REQUIRE(past_startup(ranks[1], 0));  // reports no phase: runs from its spawn
  REQUIRE(startup_line(0, ref, ranks) ==
          "attempt 0: every rank past its start-up, with no first step, 3.65 s after launch "
          "(until spawned 0.01, start 0.04, imports 1.26, process group 2.20, first collective "
          "0.14; slowest rank 0)");
}
