// The agent's decision when an attempt ends, case by case (round_decision.h;
// the table in docs/agent.md).
#include <catch2/catch.hpp>

#include "round_decision.h"

using namespace ccrun;
using namespace ccrun::agent;
using Action = Decision::Action;

namespace {

RestartBudget budget(int left, int num_nodes = 2, int min_nodes = 1, bool fixed = false) {
  return {left, 3, fixed, num_nodes, min_nodes};
}

AttemptEnd ended(RoundEndKind kind, const std::string& detail = "") {
  return AttemptEnd::round_ended(kind, detail);
}

}  // namespace

TEST_CASE("decision: success leaves and a signal stops, whatever the budget", "[decision]") {
  for (int left : {0, 3}) {
    CHECK(decide(AttemptEnd::succeeded(), budget(left)).action == Action::kLeave);
    CHECK(decide(AttemptEnd::signalled(), budget(left)).action == Action::kStop);
    CHECK(decide(ended(RoundEndKind::kAllDone), budget(left)).action == Action::kLeave);
  }
}

TEST_CASE("decision: a failure restarts while the budget lasts", "[decision]") {
  CHECK(decide(ended(RoundEndKind::kRestartRequested), budget(1)).action == Action::kRestart);
  Decision d = decide(ended(RoundEndKind::kRestartRequested), budget(0));
  CHECK(d.action == Action::kFail);
  CHECK(d.reason == "no restarts left (--max-restarts 3)");
}

TEST_CASE("decision: a node waiting to join costs no restart", "[decision]") {
  CHECK(decide(ended(RoundEndKind::kNodeWaiting), budget(0)).action == Action::kRejoin);
  CHECK(decide(ended(RoundEndKind::kNodeWaiting), budget(2)).action == Action::kRejoin);
}

TEST_CASE("decision: a dead node restarts elastic jobs that keep enough nodes", "[decision]") {
  auto dead = ended(RoundEndKind::kNodeDead, "node 1 sent no heartbeat for 15s");
  CHECK(decide(dead, budget(1, 3, 2)).action == Action::kRestart);
  Decision too_few = decide(dead, budget(1, 2, 2));
  CHECK(too_few.action == Action::kFail);
  CHECK(too_few.reason == "node 1 sent no heartbeat for 15s; the job needs 2 nodes");
  CHECK(decide(dead, budget(1, 3, 1, true)).action == Action::kFail);  // static
  CHECK(decide(dead, budget(0, 3, 2)).action == Action::kFail);        // no budget
}

TEST_CASE("decision: a close fails the job, a lost store ends this node", "[decision]") {
  CHECK(decide(ended(RoundEndKind::kClosed, "stopped on node 2"), budget(3)).reason ==
        "stopped on node 2");
  CHECK(decide(ended(RoundEndKind::kClosed), budget(3)).reason ==
        "the job was stopped on another node");
  Decision lost = decide(ended(RoundEndKind::kStoreLost, "connection refused"), budget(3));
  CHECK(lost.action == Action::kStoreLost);
  CHECK(lost.reason == "connection refused");
}

TEST_CASE("decision: a job closed by a stop signal elsewhere stops here too, no store call",
          "[decision]") {
  Decision d = decide(AttemptEnd::round_ended(RoundEndKind::kClosed,
                                              "ccrun received SIGINT on node 0", std::nullopt, 2),
                      budget(3));
  CHECK(d.action == Action::kStopped);
  CHECK(d.reason == "ccrun received SIGINT on node 0");
  CHECK(decide(ended(RoundEndKind::kClosed, "an error"), budget(3)).action == Action::kFail);
}

namespace {

AttemptEnd failed_at(int64_t steps) {
  Failure f;
  f.rank = 1;
  f.steps = steps;
  return AttemptEnd::round_ended(RoundEndKind::kRestartRequested, "", f);
}

}  // namespace

TEST_CASE("decision: attempts that fail at the same step as the one before stop the job",
          "[decision][progress]") {
  RestartBudget b = budget(10);
  std::vector<Action> actions;
  for (int attempt = 0; attempt < 5; ++attempt) {
    AttemptEnd end = failed_at(0);  // an import error: never a first step
    note_progress(b, end);
    Decision d = decide(end, b);
    actions.push_back(d.action);
    if (d.action != Action::kRestart) {
      CHECK(d.reason == "4 attempts in a row failed at step 0: restarts do not help (exit 4: do "
                        "not requeue)");
      break;
    }
    --b.restarts_left;
  }
  CHECK(actions == std::vector<Action>{Action::kRestart, Action::kRestart, Action::kRestart,
                                       Action::kNoProgress});
}

TEST_CASE("decision: a different step, or an unknown one, is no evidence against restarting",
          "[decision][progress]") {
  RestartBudget b = budget(10);
  for (int64_t steps : {50, 50, 50, 120, 120, 7, -1, -1, -1, -1}) {
    AttemptEnd end = failed_at(steps);
    note_progress(b, end);
    CHECK(decide(end, b).action == Action::kRestart);
  }
  CHECK(b.no_progress == 0);
  // Steps 50, 50, 50, 50: the fourth stops.
  for (int i = 0; i < 4; ++i) note_progress(b, failed_at(50));
  CHECK(decide(failed_at(50), b).action == Action::kNoProgress);
  // A membership change between them is no failure: it counts neither way.
  RestartBudget c = budget(10);
  note_progress(c, failed_at(0));
  note_progress(c, ended(RoundEndKind::kNodeWaiting));
  note_progress(c, failed_at(0));
  CHECK(c.no_progress == 1);
}

TEST_CASE("exclusion: a node leaves on the failure that makes its streak, if the job can go on",
          "[decision][exclusion]") {
  static_assert(ccrun::kExcludeAfterFailures == 2);
  CHECK_FALSE(leaves_on_failure(0, true, 4, 2, 0));  // the first failure: stays
  CHECK(leaves_on_failure(1, true, 4, 2, 0));        // the second in a row: leaves
  CHECK_FALSE(leaves_on_failure(1, false, 4, 2, 0)); // static: cannot form without it
  CHECK_FALSE(leaves_on_failure(1, true, 2, 2, 0));  // the job would fall under its minimum
  CHECK(leaves_on_failure(1, true, 2, 2, 1));        // ... unless a spare takes its place
}

TEST_CASE("exclusion: the streak counts the attempts this node's failure ended, in a row",
          "[decision][exclusion]") {
  Failure here, there;
  here.node_rank = 0;
  there.node_rank = 1;
  auto ended_by = [](const Failure& f) {
    return AttemptEnd::round_ended(RoundEndKind::kRestartRequested, "", f);
  };
  int streak = next_failure_streak(0, ended_by(here), 0);
  CHECK(streak == 1);
  CHECK(next_failure_streak(streak, ended_by(here), 0) == 2);
  CHECK(next_failure_streak(streak, ended_by(there), 0) == 0);  // another node's: reset
  CHECK(next_failure_streak(streak, ended(RoundEndKind::kNodeDead), 0) == 0);
  CHECK(next_failure_streak(streak, AttemptEnd::succeeded(), 0) == 0);
}
