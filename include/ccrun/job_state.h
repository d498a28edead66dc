//===- ccrun/job_state.h - A job's records in its store, and their reader -*- C++ -*-//
//
// The records the agents of one job write into its store (where: JobKeys in
// ccrun/job_keys.h), with their one JSON format each, and the one reader of
// a job's whole state that `ccrun status` and the tests use. Records stored
// on their own (RoundEnd, ClosedRecord) give and take text; records that
// nest in others (Failure in the failure report, NodeStatus with its
// RankViews) give and take JSON values, dumped and parsed only where they
// meet the store. Every reader is tolerant: agents of other versions write
// these records.
//
//   RoundEnd end{RoundEndKind::kNodeDead, 2, "node 2 sent no heartbeat", 3};
//   store.compare_set(keys.end(r), "", end.to_json());  // the first end wins
//   RoundEnd seen = RoundEnd::from_json(store.get(keys.end(r)));
//
//   Failure f;
//   f.rank = 3, f.cause = FailureCause::kOom;
//   Failure back = Failure::from_json(f.to_json());     // back.cause == kOom
//
//   JobState st = read_job_state(store, "my-job");      // never waits
//   if (st.phase == JobPhase::kStopped) std::cout << st.stop_signal;
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ccrun/exclusion.h"
#include "ccrun/name_table.h"
#include "ccrun/rank_progress.h"
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

// A wall_clock_ms() time for people: "2026-11-26 14:02:11 UTC".
// With `millis`: "2026-11-26 14:02:11.042 UTC".
std::string format_utc(int64_t ms, bool millis = false);

// What ccrun found behind a worker's (or node's) failure, beyond its exit
// status.
enum class FailureCause {
  kNone,   // a plain exit or signal
  kHang,   // the hang verdict (--hang-timeout) stopped it
  kOom,    // the kernel's OOM killer
  kTimer,  // an expired torch FileTimer
};

// Each cause's stored name ("" for kNone: what agents have always written).
inline constexpr std::array<NamedValue<FailureCause>, 4> kFailureCauseNames{{
    {"", FailureCause::kNone},
    {"hang", FailureCause::kHang},
    {"oom", FailureCause::kOom},
    {"timer", FailureCause::kTimer},
}};

// round/<R>/failure/<i>, and round/<R>/end's detail when a node asks for a
// restart: JSON {node_rank, hostname, addr, rank, local_rank, pid,
// exit_code, signal, time_ms, attempt, cause, message, stderr_tail, steps}.
// One worker's (or node's) failure as every node of the job sees it.
struct Failure {
  int node_rank = -1;
  std::string hostname, addr;
  int rank = -1, local_rank = -1;  // -1 for a node failure
  int pid = 0;
  int exit_code = 0;
  int signal = 0;
  int64_t time_ms = 0;     // wall clock, ms since the epoch (for ordering)
  int attempt = 0;
  FailureCause cause = FailureCause::kNone;
  std::string message;     // error file message, or "node stopped heartbeating"
  std::string stderr_tail;
  // The most training steps a rank of the failing node had made in this
  // attempt when it failed (each attempt counts from 0); -1: unknown (no
  // rank of it reports progress). What tells a restart that helps from one
  // that does not (round_decision.h).
  int64_t steps = -1;

  [[nodiscard]] nlohmann::json to_json() const;
  // An unreadable record reads as a failure whose message says so; a cause
  // of a newer version reads as kNone.
  [[nodiscard]] static Failure from_json(const nlohmann::json& j);
};

// round/<R>/status/<rank>: JSON {host, addr, node_rank, first_rank, nproc,
// attempt, beat_ms, sampled_ms, pid, ranks}, a node's last heartbeat (wall clock: the
// reader is another machine), with its ranks' progress.
struct NodeStatus {
  std::string host, addr;
  int node_rank = -1;
  int first_rank = 0;     // RANK of its LOCAL_RANK 0
  int nproc = 0;          // its workers
  int attempt = 0;        // its restart count
  int64_t beat_ms = 0;    // when it beat
  int64_t sampled_ms = 0; // when its agent sampled `ranks` (0: unknown, take beat_ms)
  int pid = 0;            // its agent's
  std::vector<RankView> ranks;  // its workers' progress, as its agent last sampled it

  [[nodiscard]] nlohmann::json to_json() const;
  [[nodiscard]] static NodeStatus from_json(const nlohmann::json& j);  // tolerant
};

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

// round/<R>/end: JSON {"kind", "node", "detail", "next_expected",
// "stop_signal", "time_ms"}.
struct RoundEnd {
  RoundEndKind kind = RoundEndKind::kClosed;
  int node = -1;           // the node concerned, -1 when none
  std::string detail;
  int next_expected = -1;  // nodes that will surely rejoin the next round; -1: unknown
  int stop_signal = 0;     // kClosed by a stop signal on some node: its number (0: none)
  int64_t time_ms = 0;     // when it was written (wall clock; end_round sets it); 0: unknown

  [[nodiscard]] std::string to_json() const;
  // An unreadable record reads as kClosed saying so: a round whose end
  // nobody can read is over for everyone.
  [[nodiscard]] static RoundEnd from_json(const std::string& text);
  // kRestartRequested: the Failure its detail holds; nullopt for other kinds.
  [[nodiscard]] std::optional<Failure> failure() const;
};

// closed: JSON {"reason", "stop_signal", "time_ms"}. `stop_signal` is the
// signal a user sent to stop the job (0: the job failed); `time_ms` when the
// job was closed (wall clock; set_closed sets it; 0: unknown, an older agent).
struct ClosedRecord {
  std::string reason;
  int stop_signal = 0;
  int64_t time_ms = 0;

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
  // By node rank: each node's last status record, nullopt for a node that
  // has not beaten yet.
  std::vector<std::optional<NodeStatus>> node_statuses;
  std::optional<Failure> last_failure;  // the newest failure report
  int last_failure_round = -1;          // the round it ended
  // The hosts of the agents waiting as hot spares (rendezvous/round_end.h).
  std::vector<std::string> spares;
  // Every node the job excluded, live or past (ccrun/exclusion.h).
  ExclusionList exclusions;
};

// Reads `run_id`'s state from `store`. Every read is a check or a single get
// of a key known to exist: nothing waits, whatever the job is doing.
JobState read_job_state(store::Store& store, const std::string& run_id);

}  // namespace ccrun
