// The agent's decision when an attempt ends, case by case (round_decision.h;
// the table in docs/agent.md).
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

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

// An attempt that failed at `steps` with `exit_code`, its stderr ending in
// `last_line` and its error record (torch's @record) `message`.
AttemptEnd failed_at(int64_t steps, int exit_code = 3, const std::string& last_line = "",
                     const std::string& message = "") {
  Failure f;
  f.rank = 1;
  f.steps = steps;
  f.exit_code = exit_code;
  f.stderr_tail = "Traceback (most recent call last):\n  ...\n" + last_line + "\n";
  f.message = message;
  return AttemptEnd::round_ended(RoundEndKind::kRestartRequested, "", f);
}

std::vector<AttemptEnd> times(int n, const AttemptEnd& end) { return std::vector<AttemptEnd>(n, end); }

std::vector<AttemptEnd> operator+(std::vector<AttemptEnd> a, const std::vector<AttemptEnd>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// One row: --stop-without-progress, --max-restarts, how the attempts end,
// and the decision after each (until the first that neither restarts nor
// rejoins), the last one's reason.
struct ProgressRow {
  const char* what;
  int stop_without_progress;
  int max_restarts;
  std::vector<AttemptEnd> attempts;
  std::vector<Action> actions;
  std::string reason;
};

// Plays `row` as the agent's loop does: note_progress, decide, a restart spent.
std::pair<std::vector<Action>, std::string> play(const ProgressRow& row) {
  RestartBudget b = budget(row.max_restarts);
  b.max_restarts = row.max_restarts;
  b.stop_without_progress = row.stop_without_progress;
  std::vector<Action> actions;
  for (const auto& end : row.attempts) {
    note_progress(b, end);
    Decision d = decide(end, b);
    actions.push_back(d.action);
    if (d.action != Action::kRestart && d.action != Action::kRejoin) return {actions, d.reason};
    if (d.action == Action::kRestart) --b.restarts_left;
  }
  return {actions, ""};
}

constexpr Action R = Action::kRestart, J = Action::kRejoin, L = Action::kLeave,
                 F = Action::kFail, S = Action::kNoProgress;

}  // namespace

TEST_CASE("decision: restarts that repeat one failure, with --stop-without-progress and without",
          "[decision][progress]") {
  const AttemptEnd start_up = failed_at(0, 3, "ConnectionRefusedError: data server");
  const std::string plain6 = "no restarts left (--max-restarts 6)";
  const std::vector<ProgressRow> rows{
      {"off: a failure at start-up spends every restart, as torchrun's --max-restarts",
       0, 6, times(7, start_up), {R, R, R, R, R, R, F},
       plain6 + "; all 7 attempts failed at step 0 with the same error: --stop-without-progress 4 "
                "would have stopped the job after 4 (exit 4: do not requeue)"},
      {"off: five failures at start-up, then the data server is up",
       0, 6, times(5, start_up) + std::vector{AttemptEnd::succeeded()}, {R, R, R, R, R, L}, ""},
      {"off: only the last attempts alike: the note says so and suggests fewer",
       0, 4, std::vector{failed_at(10)} + times(4, start_up), {R, R, R, R, F},
       "no restarts left (--max-restarts 4); the last 4 attempts failed at step 0 with the same "
       "error: --stop-without-progress 3 would have stopped the job after 3 (exit 4: do not "
       "requeue)"},
      {"off: two alike are no pattern worth a note",
       0, 1, times(2, start_up), {R, F}, "no restarts left (--max-restarts 1)"},
      {"off: the same step with other errors: no note",
       0, 2, {failed_at(0, 3), failed_at(0, 1), failed_at(0, 3)}, {R, R, F},
       "no restarts left (--max-restarts 2)"},
      {"4: the fourth attempt alike stops the job with exit 4",
       4, 10, times(5, start_up), {R, R, R, S},
       "4 attempts in a row failed at step 0 with the same error: restarts do not help "
       "(--stop-without-progress 4; exit 4: do not requeue)"},
      {"2: the second attempt alike stops it",
       2, 10, times(3, failed_at(3)), {R, S},
       "2 attempts in a row failed at step 3 with the same error: restarts do not help "
       "(--stop-without-progress 2; exit 4: do not requeue)"},
      {"3: stopping wins over a spent budget (exit 4, not 1)",
       3, 2, times(3, start_up), {R, R, S},
       "3 attempts in a row failed at step 0 with the same error: restarts do not help "
       "(--stop-without-progress 3; exit 4: do not requeue)"},
      {"4: the same step with another exit code is another failure",
       4, 10, times(3, failed_at(0, 3)) + times(4, failed_at(0, 1)), {R, R, R, R, R, R, S},
       "4 attempts in a row failed at step 0 with the same error: restarts do not help "
       "(--stop-without-progress 4; exit 4: do not requeue)"},
      {"4: the same step with another exception (stderr's last line) is another failure",
       4, 10,
       {failed_at(0, 1, "ValueError: a"), failed_at(0, 1, "KeyError: b"),
        failed_at(0, 1, "ValueError: a"), failed_at(0, 1, "KeyError: b")},
       {R, R, R, R}, ""},
      {"4: the error record's first line decides, not its traceback",
       4, 10,
       times(2, failed_at(0, 1, "", "ValueError: a\n  File x.py, line 1")) +
           times(2, failed_at(0, 1, "", "ValueError: a\n  File y.py, line 2")),
       {R, R, R, S},
       "4 attempts in a row failed at step 0 with the same error: restarts do not help "
       "(--stop-without-progress 4; exit 4: do not requeue)"},
      {"4: other steps, or unknown ones, never stop it",
       4, 20,
       {failed_at(50), failed_at(50), failed_at(50), failed_at(120), failed_at(120), failed_at(7),
        failed_at(-1), failed_at(-1), failed_at(-1), failed_at(-1)},
       {R, R, R, R, R, R, R, R, R, R}, ""},
      {"4: a node joining between failures is no failure: it counts neither way",
       4, 10,
       {start_up, ended(RoundEndKind::kNodeWaiting), start_up, start_up, start_up},
       {R, J, R, R, S},
       "4 attempts in a row failed at step 0 with the same error: restarts do not help "
       "(--stop-without-progress 4; exit 4: do not requeue)"},
      {"10: the budget runs out first: a plain failure, no note (the setting is on)",
       10, 2, times(3, start_up), {R, R, F}, "no restarts left (--max-restarts 2)"},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    auto [actions, reason] = play(row);
    CHECK(actions == row.actions);
    CHECK(reason == row.reason);
  }
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
