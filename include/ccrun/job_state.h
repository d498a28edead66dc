//===- ccrun/job_state.h - A job's records in its store, and their reader -*- C++ -*-//
//
// The records the agents of one job write into its store (where: JobKeys in
// ccrun/job_keys.h), with their one text format each, and the one reader of
// a job's whole state that `ccrun status` and the tests use.
//
//   RoundEnd end{RoundEndKind::kNodeDead, 2, "node 2 sent no heartbeat", 3};
//   store.compare_set(keys.end(r), "", end.to_json());  // the first end wins
//   RoundEnd seen = RoundEnd::from_json(store.get(keys.end(r)));
//
//   JobState st = read_job_state(store, "my-job");      // never waits
//   if (st.phase == JobPhase::kStopped) std::cout << st.stop_signal;
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ccrun/store.h"

namespace ccrun {

// Now, in milliseconds since the Unix epoch on the wall clock: how the job's
// records carry times (a status's beat_ms, a failure's time_ms), since their
// readers are other machines; also the clock the nodes' heartbeat schedule
// shares (rendezvous/round_watch.h).
inline int64_t wall_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Why a round ended. Every kind but kStoreLost is written to round/<R>/end;
// kStoreLost is what a node's own watcher concludes when the store stops
// answering, so no other node can be told it.
enum class RoundEndKind {
  kRestartRequested,  // a node's workers failed; `detail` is its report
  kNodeDead,          // `node` missed its heartbeats
  kNodeWaiting,       // a new node waits to join (scale up)
  kAllDone,           // every node's workers exited 0: the job succeeded
  kClosed,            // the job was closed; `detail` says why
  kStoreLost,         // (never stored) the store did not answer for the
                      // keep-alive window; `detail` names it and the error
};

// The stored name of a kind ("restart", "dead", "waiting", "all_done",
// "closed", "store_lost"), and back; nullopt for a name no kind has.
std::string_view to_string(RoundEndKind kind);
std::optional<RoundEndKind> parse_round_end_kind(std::string_view name);

// round/<R>/end: JSON {"kind", "node", "detail", "next_expected"}.
struct RoundEnd {
  RoundEndKind kind = RoundEndKind::kClosed;
  int node = -1;           // the node concerned, -1 when none
  std::string detail;
  int next_expected = -1;  // nodes that will surely rejoin the next round; -1: unknown
  int stop_signal = 0;     // kClosed by a stop signal on some node: its number (0: none)

  [[nodiscard]] std::string to_json() const;
  // An unreadable record reads as kClosed saying so: a round whose end
  // nobody can read is over for everyone.
  [[nodiscard]] static RoundEnd from_json(const std::string& text);
};

// closed: JSON {"reason", "stop_signal"}. `stop_signal` is the signal a
// user sent to stop the job (0: the job failed).
struct ClosedRecord {
  std::string reason;
  int stop_signal = 0;

  [[nodiscard]] std::string to_json() const;
  [[nodiscard]] static ClosedRecord from_json(const std::string& text);
};

// What `ccrun status` reports a job to be doing.
enum class JobPhase {
  kUnknown,     // the store holds nothing of this job
  kForming,     // the first round has not closed yet
  kRunning,
  kRestarting,  // the current round ended; the next one is forming
  kFinished,    // every node's workers exited 0
  kFailed,      // closed for good by a failure
  kStopped,     // closed for good by a signal a user sent
};
std::string_view to_string(JobPhase phase);

// A job's whole state, as its store holds it now.
struct JobState {
  std::string run_id;
  JobPhase phase = JobPhase::kUnknown;
  int round = -1;               // the current round; -1 before one closed
  int64_t joined = 0;           // kForming: nodes that joined round 0 so far
  int num_nodes = 0;            // participants of the current round
  int64_t nodes_waiting = 0;    // nodes already joining the next round
  std::string reason;           // kFailed, kStopped, kRestarting: why
  int stop_signal = 0;          // kStopped: the signal
  // By node rank: each node's last status record (JSON; job_keys.h gives
  // its fields), "" for a node that has not beaten yet.
  std::vector<std::string> node_statuses;
  std::string last_failure;     // the newest failure report (JSON), "" if none
  int last_failure_round = -1;  // the round it ended
};

// Reads `run_id`'s state from `store`. Every read is a check or a single get
// of a key known to exist: nothing waits, whatever the job is doing.
JobState read_job_state(store::Store& store, const std::string& run_id);

}  // namespace ccrun
