//===- round_decision.h - What the agent does when an attempt ends -*- C++ -*-===//
//
// The agent's one decision, as a pure function: given how an attempt ended
// (its workers succeeded, a signal stopped it, or its round ended for a
// reason) and the restart budget, does the node leave, stop, restart its
// workers in a new round, fail the job for good, or give up on a lost store?
// The agent's loop (agent.cpp) only carries the decision out, so every case
// is unit-tested here (tests/agent/round_decision_test.cpp) and written out
// in docs/agent.md's decision table.
//
//   Decision d = decide(AttemptEnd::round_ended(RoundEndKind::kNodeDead, why), budget);
//   // d.action: kRestart, or kFail when too few nodes are left, ...
//
//===----------------------------------------------------------------------===//
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "ccrun/exclusion.h"
#include "ccrun/job_state.h"

namespace ccrun::agent {

// How an attempt of this node ended.
struct AttemptEnd {
  enum class How {
    kSucceeded,   // every node's workers exited 0 (kAllDone)
    kSignalled,   // a stop signal reached this agent
    kRoundEnded,  // a failure here or elsewhere, a dead or a new node, a close
  };
  How how = How::kRoundEnded;
  RoundEndKind kind = RoundEndKind::kRestartRequested;  // kRoundEnded: why
  std::string detail;                                   // the event's detail
  std::optional<Failure> failure;  // kRestartRequested: the failure behind it, when known
  int stop_signal = 0;  // kClosed by a stop signal on another node: its number

  static AttemptEnd succeeded() { return {How::kSucceeded, RoundEndKind::kAllDone, "", {}, 0}; }
  static AttemptEnd signalled() { return {How::kSignalled, RoundEndKind::kClosed, "", {}, 0}; }
  static AttemptEnd round_ended(RoundEndKind kind, std::string detail,
                                std::optional<Failure> failure = std::nullopt,
                                int stop_signal = 0) {
    return {How::kRoundEnded, kind, std::move(detail), std::move(failure), stop_signal};
  }
};

// What the job allows: the restart budget and the membership rules.
struct RestartBudget {
  int restarts_left = 0;   // of --max-restarts
  int max_restarts = 0;    // as given, for the message
  bool static_membership = false;  // the static backend: every node must stay
  int num_nodes = 1;       // the ended round's nodes
  int min_nodes = 1;       // --nnodes' minimum
  // --stop-without-progress: failed attempts in a row, at the same step with
  // the same error, that stop the job (kNoProgress); 0: never, as torchrun.
  int stop_without_progress = 0;
  // What note_progress learned: the last failed attempt's failure (none
  // when its record was not known), how many failed attempts in a row, up
  // to it, failed as it did (0 when its step is unknown), and how many
  // attempts failed in all.
  std::optional<Failure> last_failure{};
  int same_in_a_row = 0;
  int failed_attempts = 0;
};

// The exit status of a job stopped by --stop-without-progress: "do not
// requeue" to a scheduler.
inline constexpr int kExitNoProgress = 4;

// The --stop-without-progress a failure report suggests when the setting was
// off and the job spent its restarts repeating one failure: 4 attempts, as
// NVIDIA's ft_launcher stops after 3 restarts without progress.
inline constexpr int kSuggestedStopWithoutProgress = 4;

// Counts `end` into `budget`'s progress. Two failed attempts failed alike
// when they failed at exactly the same step (0: before any step, the usual
// case of an import error, a bad configuration or a device that fails at
// start-up) with the same error: the same cause, exit code or signal, and
// the same first line of the error record (torch's @record), else the same
// last line of stderr (Python's exception line). Each attempt counts its
// steps from 0, so fewer or more steps than the one before says nothing
// either way about a job that resumes from a checkpoint: the same count with
// the same error again and again is the mark of a failure that a restart
// repeats. Unknown steps (a program that reports no progress) never count.
// Ends that are no failure (a node joining) leave the count as it was.
void note_progress(RestartBudget& budget, const AttemptEnd& end);

// Exclusion for repeated failures (ccrun/exclusion.h): `streak` is how many
// attempts in a row, just before this one, ended by a failure of this
// node's workers (the round's first failure, its root cause). A restart
// request from this node then also takes the node out when this failure
// makes kExcludeAfterFailures in a row, the job is elastic (a dynamic
// rendezvous: a static one cannot form without the node), and the job keeps
// at least `min_nodes` without it, counting the hot spares waiting.
[[nodiscard]] bool leaves_on_failure(int streak, bool elastic, int num_nodes, int min_nodes,
                                     int spares);

// The streak after `end`: one more when its root cause was a failure of
// node `node_rank` (this node), else 0.
[[nodiscard]] int next_failure_streak(int streak, const AttemptEnd& end, int node_rank);

struct Decision {
  enum class Action {
    kLeave,      // the job succeeded: leave the round, exit 0
    kStop,       // a signal: close the job, exit 128+N
    kStopped,    // another node was stopped by a signal (the job is closed): exit
                 // 128+N too, with no store call (the store may be gone with it)
    kRestart,    // restart the workers in a new round; one restart spent
    kRejoin,     // membership changed (a node waits to join): new round, no restart spent
    kFail,       // close the job for good; `reason` says why; exit 1
    kNoProgress,  // as kFail, but --stop-without-progress attempts in a row failed
                  // alike (note_progress): exit kExitNoProgress
    kStoreLost,  // the store stopped answering: end here, exit 1
  };
  Action action = Action::kFail;
  // kFail, kNoProgress: the job's end reason (with no restarts left and
  // --stop-without-progress off, it says when the restarts repeated one
  // failure, and what the setting would have saved); kStoreLost: the
  // store's error.
  std::string reason;
};

[[nodiscard]] Decision decide(const AttemptEnd& end, const RestartBudget& budget);

}  // namespace ccrun::agent
