// A job id whose run is over, as a newcomer finds it: the decision, one case
// per row of its table in docs/store.md, and the message.
#include <catch2/catch.hpp>

#include <csignal>

#include "ccrun/finished_run.h"

using namespace ccrun;

namespace {

RoundEnd end_of(RoundEndKind kind, int64_t time_ms = 0) {
  RoundEnd e;
  e.kind = kind;
  e.time_ms = time_ms;
  return e;
}

constexpr int64_t kEnded = 1'700'000'000'000;  // 2023-11-14 22:13:20 UTC

}  // namespace

TEST_CASE("finished run: no records, or a round still forming: no run to refuse", "[finished_run]") {
  CHECK_FALSE(finished_run(std::nullopt, std::nullopt));
}

TEST_CASE("finished run: a round that ended for a restart, a dead or a new node: the run is live",
          "[finished_run]") {
  for (auto kind : {RoundEndKind::kRestartRequested, RoundEndKind::kNodeDead,
                    RoundEndKind::kNodeWaiting}) {
    CHECK_FALSE(finished_run(std::nullopt, end_of(kind)));
  }
}

TEST_CASE("finished run: the current round ended all_done: it succeeded, at the end's time",
          "[finished_run]") {
  auto run = finished_run(std::nullopt, end_of(RoundEndKind::kAllDone, kEnded));
  REQUIRE(run);
  CHECK(run->how == FinishedRun::How::kSucceeded);
  CHECK(run->time_ms == kEnded);
  CHECK(run->reason.empty());
}

TEST_CASE("finished run: a closed record: failed, with its reason and time, whatever the round's end",
          "[finished_run]") {
  ClosedRecord c{"no restarts left (--max-restarts 0)", 0, kEnded};
  for (std::optional<RoundEnd> end : {std::optional<RoundEnd>{}, std::optional(end_of(RoundEndKind::kClosed)),
                                      std::optional(end_of(RoundEndKind::kAllDone))}) {
    auto run = finished_run(c, end);
    REQUIRE(run);
    CHECK(run->how == FinishedRun::How::kFailed);
    CHECK(run->reason == c.reason);
    CHECK(run->time_ms == kEnded);
  }
}

TEST_CASE("finished run: a closed record with a stop signal: stopped", "[finished_run]") {
  auto run = finished_run(ClosedRecord{"ccrun received SIGTERM", SIGTERM, kEnded}, std::nullopt);
  REQUIRE(run);
  CHECK(run->how == FinishedRun::How::kStopped);
  CHECK(run->stop_signal == SIGTERM);
}

TEST_CASE("already ran: the message says when and how the previous run ended, and the fixes",
          "[finished_run]") {
  FinishedRun ok{FinishedRun::How::kSucceeded, "", 0, kEnded};
  std::string m = already_ran_message("job7", ok, kEnded + 192'000, "wait until the store forgets it");
  CHECK(m == "the job id 'job7' already ran on this store: its previous run ended 3m12s ago "
             "(2023-11-14 22:13:20 UTC) and succeeded; nothing was started here. To run it again, "
             "use a new --rdzv-id, or wait until the store forgets it");

  FinishedRun failed{FinishedRun::How::kFailed, "no restarts left (--max-restarts 0)", 0, kEnded};
  CHECK_THAT(already_ran_message("job7", failed, kEnded + 5'000, ""),
             Catch::Contains("ended 5s ago (2023-11-14 22:13:20 UTC) and failed (the previous run's "
                             "reason: no restarts left (--max-restarts 0)); nothing was started "
                             "here. To run it again, use a new --rdzv-id"));

  FinishedRun stopped{FinishedRun::How::kStopped, "ccrun received SIGTERM", SIGTERM, kEnded};
  CHECK_THAT(already_ran_message("job7", stopped, kEnded, ""),
             Catch::Contains("ended just now (2023-11-14 22:13:20 UTC) and was stopped by SIGTERM "
                             "(the previous run's reason: ccrun received SIGTERM)"));
}

TEST_CASE("already ran: a time not recorded, or ahead of this clock", "[finished_run]") {
  FinishedRun old{FinishedRun::How::kSucceeded, "", 0, 0};  // an agent that did not record it
  CHECK_THAT(already_ran_message("j", old, kEnded, ""),
             Catch::Contains("its previous run ended at a time it did not record and succeeded"));
  FinishedRun ahead{FinishedRun::How::kSucceeded, "", 0, kEnded + 60'000};  // the writer's clock runs ahead
  CHECK_THAT(already_ran_message("j", ahead, kEnded, ""), Catch::Contains("ended just now ("));
}
