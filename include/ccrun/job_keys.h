//===- ccrun/job_keys.h - A job's names: store keys and worker variables -*- C++ -*-//
//
// What the agent, the rendezvous, `ccrun status` and the collectives library
// in the workers must agree on, in one place: the variables the agent puts
// in every worker's environment for ccrun's own library, and where a job's
// state lives in its store.
//
// Every key of one job is under "ccrun/<run_id>/". Payloads are JSON.
//   current_round              decimal: the newest round agents should join
//   closed                     JSON {"reason"}: the job is over; joins fail
//   round/<R>/joined           counter: agents that joined round R (dynamic)
//   round/<R>/size             decimal: the participants of R once it closed
//   round/<R>/expected         decimal: nodes that will surely rejoin R
//   round/<R>/node/<slot>      JSON NodeInfo {addr, hostname, nproc, master_port,
//                              prev_rank}, by join slot (static: node rank)
//   round/<R>/hb/<rank>        decimal: heartbeats of node <rank> (set by it alone)
//   round/<R>/end              JSON {"kind", "node", "detail", "next_expected"}:
//                              why R ended; the first writer wins
//   round/<R>/failures         counter, and round/<R>/failure/<i> JSON reports
//   round/<R>/done/<rank>      "1": node <rank>'s workers all exited 0 (the
//                              exit barrier; one key per node, so a store
//                              that lost its state can be told again)
//   round/<R>/exited           counter: nodes that left the round
//   round/<R>/status/<rank>    JSON {host, addr, node_rank, first_rank, nproc,
//                              attempt, beat_ms, pid, ranks}: node <rank>'s last
//                              heartbeat (wall clock), for `ccrun status`;
//                              `ranks` its workers' progress (agent::RankView
//                              JSON), from which node 0 judges hangs
//   collectives/attempt_<n>/   the workers' process groups of attempt n
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

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
  explicit JobKeys(const std::string& run_id) : base_("ccrun/" + run_id + "/") {}
  const std::string& base() const { return base_; }
  std::string current_round() const { return base_ + "current_round"; }
  std::string closed() const { return base_ + "closed"; }
  std::string round(int r, const std::string& leaf) const {
    return base_ + "round/" + std::to_string(r) + "/" + leaf;
  }
  std::string node(int r, int rank) const { return round(r, "node/" + std::to_string(rank)); }
  std::string heartbeat(int r, int rank) const { return round(r, "hb/" + std::to_string(rank)); }
  std::string failure(int r, int i) const { return round(r, "failure/" + std::to_string(i)); }
  std::string done(int r, int rank) const { return round(r, "done/" + std::to_string(rank)); }
  std::string status(int r, int rank) const {
    return round(r, "status/" + std::to_string(rank));
  }
  // The prefix of the workers' process groups in attempt n.
  std::string collectives(int attempt) const {
    return base_ + "collectives/attempt_" + std::to_string(attempt);
  }

 private:
  std::string base_;
};

}  // namespace ccrun
