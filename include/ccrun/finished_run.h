//===- ccrun/finished_run.h - A job id whose run is over, as a newcomer finds it -*- C++ -*-//
//
// A store that outlives a job (ccrun-rendezvous, etcd) keeps the job's keys
// after its run ended, until it forgets them (--finished-job-ttl; etcd never
// by itself). An agent that then arrives for the same id must not take the
// old run's end for its own: that would count a training run that never
// happened as a success. Like torchrun, whose rendezvous is closed for good
// once its run ended, ccrun refuses the id: the agent starts nothing and
// exits kExitAlreadyRan, saying how and when the previous run ended and how
// to run again. (A node that waited as a hot spare while the run was live
// is a part of that run: it exits 0 when the run succeeds; not this case.)
//
// Two pure functions: the decision from the records the arriving agent
// reads (docs/store.md, "Running a job id again", has its table), and the
// message.
//
//   std::optional<FinishedRun> prev = finished_run(closed, current_end);
//   if (prev) throw JobAlreadyRanError(already_ran_message("job7", *prev, wall_clock_ms(), hint));
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ccrun/job_state.h"

namespace ccrun {

// The exit status of an agent that arrived for a job id whose run had
// already ended, and so started nothing: neither a success (no program
// ran) nor the old run's failure. A scheduler that sees it should not
// requeue the same command: it would be refused again.
inline constexpr int kExitAlreadyRan = 5;

// An earlier run of a job id, over before this agent arrived.
struct FinishedRun {
  enum class How {
    kSucceeded,  // its last round ended all_done: every worker exited 0
    kFailed,     // closed with no stop signal: `reason` says why
    kStopped,    // closed by a signal a user sent: `stop_signal`, `reason`
  };
  How how = How::kFailed;
  std::string reason;   // kFailed, kStopped: the closed record's reason
  int stop_signal = 0;  // kStopped: the signal
  int64_t time_ms = 0;  // when it ended (its writer's wall clock); 0: not recorded
};

// What the records of a job id say of its run to an agent that arrives for
// it (before it joins any round): `closed` is the closed record if the id
// has one, `current_end` the end of its current round if that round has
// one. A closed record means the run is over (failed or stopped); else a
// current round that ended all_done means it succeeded. nullopt: no run,
// or one still live (any other end: its next round forms; join it).
[[nodiscard]] std::optional<FinishedRun> finished_run(const std::optional<ClosedRecord>& closed,
                                                      const std::optional<RoundEnd>& current_end);

// The message of an agent that arrived for `run_id` after its run `run`
// ended: that nothing was started, how and when the previous run ended
// (`now_ms`, this machine's wall clock, says how long ago; a run's reason is
// labelled as the previous run's), and the ways to run again: a new
// --rdzv-id, or `forget_hint` (how this job's store forgets the id; from
// the agent, which knows the store: forget_hint() in agent/store_plan.h).
[[nodiscard]] std::string already_ran_message(const std::string& run_id, const FinishedRun& run,
                                              int64_t now_ms, std::string_view forget_hint);

}  // namespace ccrun
