//===- ccrun/job_keys.h - A job's names: store keys and worker variables -*- C++ -*-//
//
// What the agent, the rendezvous, `ccrun status` and the collectives library
// in the workers must agree on, in one place: the variables the agent puts
// in every worker's environment for ccrun's own library, and where a job's
// state lives in its store.
//
// Every key of one job is under "ccrun/<run_id>/"; each has one function of
// JobKeys below, so renaming a key is a one-line change. Payloads are JSON
// (the records' formats are in ccrun/job_state.h) or decimal text.
//   current_round              decimal: the newest round agents should join
//   closed                     ClosedRecord: the job is over; joins fail, and
//                              an agent that arrives later for the id is
//                              refused (ccrun/finished_run.h; a done marker:
//                              see JobKeys::split)
//   round/<R>/joined           counter: agents that joined round R (dynamic)
//   round/<R>/member/<slot>    the token of the agent that holds join slot
//                              <slot> (dynamic: a restarted store may give a
//                              slot to another agent; the token tells)
//   round/<R>/size             decimal: the participants of R once it closed
//   round/<R>/expected         decimal: nodes that will surely rejoin R
//   round/<R>/node/<slot>      JSON NodeInfo {addr, hostname, nproc, master_port,
//                              prev_rank}, by join slot (static: node rank)
//   round/<R>/plan             JSON {num_nodes, world_size, master_addr,
//                              master_port}: the round's shape, written once by
//                              its planner (join slot 0; any node after a grace)
//   round/<R>/place/<slot>     JSON {node_rank, rank_offset, watch, watch_addr}:
//                              where the node of join slot <slot> stands, and
//                              the node it watches (the previous node rank)
//   round/<R>/hb/<rank>        decimal: heartbeats of node <rank> (set by it
//                              alone, read by the next node rank alone)
//   round/<R>/end              RoundEnd: why R ended; the first writer wins
//   round/<R>/failures         counter, and round/<R>/failure/<i> JSON reports
//   round/<R>/done/<rank>      "1": node <rank>'s workers all exited 0 (the
//                              exit barrier; one key per node, so a store
//                              that lost its state can be told again)
//   round/<R>/finished         counter: nodes that marked done (the last one
//                              ends the round)
//   round/<R>/exited           counter: nodes that left the round
//   round/<R>/all_exited       "1": every node left round R (a done marker)
//   round/<R>/status/<rank>    JSON {host, addr, node_rank, first_rank, nproc,
//                              attempt, beat_ms, pid, ranks}: node <rank>'s last
//                              heartbeat (wall clock), for `ccrun status`;
//                              `ranks` its workers' progress (agent::RankView
//                              JSON), from which node 0 judges hangs
//   round/<R>/watch            JSON WatchLease {refresh_ms, reader, seq}: a
//                              reader (`ccrun top`) watches round R; it
//                              rewrites it at every refresh (the lease's
//                              renewal), and the nodes publish their status
//                              at its rate while it changes
//   round/<R>/watchers         counter: the watch sessions started in R
//   round/<R>/wake/<g>         "1": wakes the nodes' round watches that wait
//                              on it: set by the reader that starts session
//                              g + 1, and by the round's end (every g up to
//                              the sessions started), ccrun/watch_lease.h
//   round/<R>/hang_evidence/<rank>  JSON {flight_records, stack_classes}:
//                              what node <rank> found of round R's hang, for
//                              node 1 to compare and merge (its ranks' NCCL
//                              flight records and stack classes); set once the
//                              node has its ranks' stacks
//   round/<R>/spares           JSON {closed, tokens}: agents that came to a
//                              full round R and wait as hot spares; its ender
//                              closes the list and admits some to R + 1
//   round/<R>/admitted         JSON [token, ...]: the spares R's end admitted
//   round/<R>/pmi/kvs/<key>    --mpi: the MPI ranks' PMI-1 key-value space
//                              of round R (agent/mpi/pmi_server.h): each
//                              node's puts, written at its barrier
//   round/<R>/pmi/barrier/<n>  counter: ranks that entered the n-th PMI
//                              barrier of round R; .../done "1" once all did
//   exclusions                 JSON {hosts: {host: Exclusion}, write}: nodes kept out for a
//                              cool-down (ccrun/exclusion.h)
//   collectives/attempt_<n>/   the workers' process groups of attempt n
//
// A standalone store deletes a finished job's keys some time after one of
// its done markers was written (store/finished_jobs.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ccrun {

// Variables ccrun's agent sets in every worker's environment for ccrun's
// collectives library (torchrun's own names are in docs/agent.md).
namespace worker_env {
inline constexpr const char* kStoreAddr = "CCRUN_STORE_ADDR";  // the job's store
inline constexpr const char* kStorePort = "CCRUN_STORE_PORT";
inline constexpr const char* kAttempt = "CCRUN_ATTEMPT";       // restart count
inline constexpr const char* kRunId = "CCRUN_RUN_ID";
}  // namespace worker_env

class JobKeys {
 public:
  explicit JobKeys(const std::string& run_id) : base_(std::string(kRoot) + run_id + "/") {}
  const std::string& base() const { return base_; }

  std::string current_round() const { return base_ + "current_round"; }
  std::string closed() const { return base_ + "closed"; }
  std::string joined(int r) const { return round(r, "joined"); }
  std::string member(int r, int slot) const { return round(r, "member/", slot); }
  std::string size(int r) const { return round(r, "size"); }
  std::string expected(int r) const { return round(r, "expected"); }
  std::string node(int r, int slot) const { return round(r, "node/", slot); }
  std::string plan(int r) const { return round(r, "plan"); }
  std::string place(int r, int slot) const { return round(r, "place/", slot); }
  std::string heartbeat(int r, int rank) const { return round(r, "hb/", rank); }
  std::string end(int r) const { return round(r, "end"); }
  std::string failures(int r) const { return round(r, "failures"); }
  std::string failure(int r, int i) const { return round(r, "failure/", i); }
  std::string done(int r, int rank) const { return round(r, "done/", rank); }
  std::string finished(int r) const { return round(r, "finished"); }
  std::string exited(int r) const { return round(r, "exited"); }
  std::string all_exited(int r) const { return round(r, kAllExited); }
  std::string status(int r, int rank) const { return round(r, "status/", rank); }
  std::string hang_evidence(int r, int rank) const { return round(r, "hang_evidence/", rank); }
  std::string watch(int r) const { return round(r, "watch"); }
  std::string watchers(int r) const { return round(r, "watchers"); }
  std::string wake(int r, int64_t g) const { return round(r, "wake/") + std::to_string(g); }
  std::string spares(int r) const { return round(r, "spares"); }
  std::string admitted(int r) const { return round(r, "admitted"); }
  // The prefix of round R's PMI-1 space and barriers (--mpi), ending in '/'.
  std::string pmi(int r) const { return round(r, "pmi/"); }
  std::string exclusions() const { return base_ + "exclusions"; }
  // The prefix of the workers' process groups in attempt n.
  std::string collectives(int attempt) const {
    return base_ + "collectives/attempt_" + std::to_string(attempt);
  }

  // A key of some job, taken apart: `job` is its "ccrun/<run_id>/" prefix,
  // `done_marker` whether it is that job's closed or round/<R>/all_exited.
  struct Split {
    std::string_view job;
    bool done_marker = false;
  };
  // nullopt for a key outside ccrun's layout (a torch worker's own keys).
  static std::optional<Split> split(std::string_view key);

 private:
  static constexpr std::string_view kRoot = "ccrun/";
  static constexpr const char* kAllExited = "all_exited";

  std::string round(int r, const char* leaf) const {
    return base_ + "round/" + std::to_string(r) + "/" + leaf;
  }
  std::string round(int r, const char* dir, int index) const {
    return round(r, dir) + std::to_string(index);
  }

  std::string base_;
};

}  // namespace ccrun
