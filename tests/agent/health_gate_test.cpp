// The health gate's verdicts (health_gate.h), on hand-made inputs, and one
// real run of the gate.
#include "health_gate.h"

#include <catch2/catch.hpp>

using namespace ccrun::agent;
using V = HealthCheck::Verdict;
using namespace std::chrono_literals;

TEST_CASE("health: free space and memory under their minimum fail, naming both figures") {
  CHECK(judge_free_space("/logs", 300ull << 20, 256ull << 20).verdict == V::kOk);
  auto low = judge_free_space("/logs", 12ull << 20, 256ull << 20);
  CHECK(low.verdict == V::kFailed);
  CHECK(low.detail == "12 MiB free in /logs, under 256 MiB");
  auto mem = judge_memory("MemTotal: 100 kB\nMemAvailable:   204800 kB\n", 512ull << 20);
  CHECK(mem.verdict == V::kFailed);
  CHECK(mem.detail == "200 MiB available, under 512 MiB");
  CHECK(judge_memory("MemAvailable: 1048576 kB\n", 512ull << 20).verdict == V::kOk);
  CHECK(judge_memory("MemTotal: 1 kB\n", 1).verdict == V::kCannotRun);
}

TEST_CASE("health: the user's check: exit 0, a failure with its output, a timeout, no command") {
  CHECK(judge_command("user", 0, false, 5s, "").verdict == V::kOk);
  auto bad = judge_command("user", 1, false, 5s, "a\nb\nGPU 3 is missing\n");
  CHECK(bad.verdict == V::kFailed);
  CHECK(bad.detail == "exit 1: a b GPU 3 is missing");
  auto slow = judge_command("user", -1, true, 2s, "");
  CHECK(slow.verdict == V::kFailed);
  CHECK(slow.detail == "still running after 2s (--health-timeout); killed");
  CHECK(judge_command("user", 127, false, 5s, "sh: x: not found\n").verdict == V::kCannotRun);
  CHECK(judge_command("user", -1, false, 5s, "").detail == "killed by a signal");
}

TEST_CASE("health: clock skew against the store's host fails over the bound, less the error") {
  using ccrun::store::ClockReading;
  using us = std::chrono::microseconds;
  auto near = judge_clock(ClockReading{us(-300), us(100)}, 1000ms);
  CHECK(near.verdict == V::kOk);
  CHECK(near.detail == "this host's clock is 0.30 ms ahead of the store host's (to within 0.05 ms)");
  auto far = judge_clock(ClockReading{us(10'002'000), us(200)}, 1000ms);
  CHECK(far.verdict == V::kFailed);
  CHECK(far.detail.rfind("this host's clock is 10002 ms behind the store host's (to within 0.10 ms), "
                         "over 1s: sync the clocks", 0) == 0);
  // Over the bound by less than the reading's error: not proven, not failed.
  CHECK(judge_clock(ClockReading{us(1'100'000), us(400'000)}, 1000ms).verdict == V::kOk);
  CHECK(judge_clock(std::nullopt, 1000ms).verdict == V::kCannotRun);
}

TEST_CASE("health: a report is healthy unless a check failed, cannot-run does not count") {
  HealthReport r;
  r.checks.push_back({"disk", V::kOk, 1, "9 MiB free"});
  r.checks.push_back({"user", V::kCannotRun, 1, "exit 127: not found"});
  CHECK(r.healthy());
  CHECK(r.reason().empty());
  r.checks.push_back({"memory", V::kFailed, 1, "1 MiB available, under 512 MiB"});
  CHECK_FALSE(r.healthy());
  CHECK(r.reason() == "memory: 1 MiB available, under 512 MiB");
  CHECK(r.to_json()["checks"][1]["verdict"] == "cannot run");
}

TEST_CASE("health: the gate runs each check, a hanging user check killed at the bound") {
  HealthGateOptions o;
  o.bound = 500ms;
  o.dirs = {"/"};
  o.min_free_bytes = 0;
  o.min_available_memory = 0;
  o.user_check = "sleep 30";
  auto t0 = std::chrono::steady_clock::now();
  HealthReport r = run_health_gate(o);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  REQUIRE(r.checks.size() == 3);  // disk, memory, user (no store)
  CHECK(r.checks[2].verdict == V::kFailed);
  CHECK_FALSE(r.healthy());
}
