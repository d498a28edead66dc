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
};

struct Decision {
  enum class Action {
    kLeave,      // the job succeeded: leave the round, exit 0
    kStop,       // a signal: close the job, exit 128+N
    kStopped,    // another node was stopped by a signal (the job is closed): exit
                 // 128+N too, with no store call (the store may be gone with it)
    kRestart,    // restart the workers in a new round; one restart spent
    kRejoin,     // membership changed (a node waits to join): new round, no restart spent
    kFail,       // close the job for good; `reason` says why; exit 1
    kStoreLost,  // the store stopped answering: end here, exit 1
  };
  Action action = Action::kFail;
  std::string reason;  // kFail: the job's end reason; kStoreLost: the store's error
};

[[nodiscard]] Decision decide(const AttemptEnd& end, const RestartBudget& budget);

}  // namespace ccrun::agent
