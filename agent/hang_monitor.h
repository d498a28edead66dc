//===- hang_monitor.h - One attempt's watch over its workers' progress -*- C++ -*-//
//
// What --hang-timeout runs while the workers of one attempt run (the user's
// side is docs/hangs.md): the workers' progress records (progress_watch.h)
// and the folder for evidence, a sample every second on the agent's
// io_context, this node's rank views published with its heartbeat, and on
// node 0 the stragglers and the verdict (hang_verdict.h) from every node's
// views. On a hang it calls the agent back; the agent decides what the hang
// does to its workers and its report, and asks the monitor for the stacks.
//
//   HangMonitor monitor(io, options, hooks);
//   monitor.add_worker_env(env, local_rank);   // for each worker, before spawning
//   monitor.start(group.pids());
//   ...
//   monitor.collect_stacks(local_views, [](HangEvidence evidence) { ... });
//
// Blocking work (reading the other nodes' views, tracing stacks) runs
// through hooks.off_loop; results come back on the io_context, and never
// after the monitor is gone.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <sys/types.h>

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ccrun/job_state.h"
#include "ccrun/hang_verdict.h"
#include "job_stacks.h"
#include "progress_watch.h"

namespace ccrun::agent {

struct HangMonitorOptions {
  std::chrono::milliseconds hang_timeout{0};  // 0: stragglers only, never a verdict
  int node_rank = 0;
  int num_nodes = 1;
  int first_rank = 0;  // this node's first global rank
  int nproc = 1;
  int attempt = 0;
  std::string host;
  std::string token;         // the agent's: names the records
  std::string evidence_prefix;  // torch's NCCL flight recorder FIFOs and dumps: <prefix>nccl_...
  std::string nccl_ras_addr;    // whom to ask for NCCL's RAS status (node_environment.h)
};

// What collect_stacks gathers about this node's ranks.
struct HangEvidence {
  nlohmann::json stacks = nlohmann::json::array();  // per rank: rank, pid, python, native, nccl_trace
  std::string ras;                                   // NCCL's RAS status; "" when none answered
  std::vector<std::string> nccl_findings;           // what the flight recorders say (flight_recorder.h)
  std::optional<JobStacks> job_stacks;              // the comparing node's: every node's stacks merged
  std::vector<int> missing_nodes;                    // the comparing node's: shares that did not come
};

class HangMonitor {
 public:
  struct Hooks {
    // This node's rank views, to go with its heartbeat.
    std::function<void(std::vector<RankView>)> publish;
    // Node 0: every node's last status, nullopt before its first heartbeat
    // (blocks: called through off_loop).
    std::function<std::vector<std::optional<NodeStatus>>()> read_statuses;
    // Runs a blocking call on a thread of its own.
    std::function<void(std::function<void()>)> off_loop;
    // Node 0 judged the job hung: the verdict, every rank's view, this
    // node's, and the first culprit's (rank -1 when unknown).
    std::function<void(const HangVerdict&, const std::vector<RankView>& all,
                       const std::vector<RankView>& local, const RankView& culprit)>
        on_hang;
    // An event for events.jsonl: its name and JSON.
    std::function<void(const std::string&, const std::string&)> event;
    // A job of several nodes: publishes this node's share of a hang's
    // evidence (JSON); reads every node's, by node rank ("" for a node whose
    // share has not come), waiting at most the given time for all. Both
    // block: called through off_loop. Unset: one node.
    std::function<void(const std::string&)> publish_evidence;
    std::function<std::vector<std::string>(std::chrono::milliseconds)> read_evidence;
    // Waits at most the given time for every node's share, without reading
    // them (blocks: called through off_loop).
    std::function<bool(std::chrono::milliseconds)> await_evidence;
  };

  HangMonitor(boost::asio::io_context& io, HangMonitorOptions options, Hooks hooks);
  ~HangMonitor();
  HangMonitor(const HangMonitor&) = delete;  // owns the records and its timer
  HangMonitor& operator=(const HangMonitor&) = delete;

  // Adds worker `local_rank`'s variables to its environment: its progress
  // record, the Python start-up hook before the worker's own PYTHONPATH, and
  // torch's NCCL flight recorder (unless the user set its variables).
  void add_worker_env(EnvBuilder& env, int local_rank) const;

  // The workers run: samples every second from now on, and keeps their
  // memory cgroup's OOM-kill counter for oom_evidence().
  // `spawned_ns`: when each was spawned (CLOCK_MONOTONIC), for their timelines.
  void start(const std::vector<pid_t>& pids, const std::vector<int64_t>& spawned_ns = {});

  // Every local worker's start-up timeline now (no system call).
  std::vector<StartupTimeline> timelines() const { return watch_.timelines(); }
  // What local rank `lr` had imported at its first step (ProgressWatch).
  std::vector<std::string> imported_modules(int lr) const { return watch_.imported_modules(lr); }

  // No more samples or verdicts (a stop is under way).
  void stop();

  // This node's rank views now.
  std::vector<RankView> sample() { return watch_.sample(); }

  // Traces `local`'s stacks and dumps their NCCL flight recorders off the
  // loop (the three at once), logs them, then calls `done` on the loop. On a
  // job of several nodes every node publishes its share (its stack classes
  // and its ranks' flight records; node 0, which judged the hang, before the
  // others learn of it), and node 1 waits a few seconds for the others',
  // prints the job's stacks merged (job_stacks.h) and compares every rank's
  // flight records; the other nodes print a line on their own ranks.
  void collect_stacks(const std::vector<RankView>& local, std::function<void(HangEvidence)> done);

  // After collect_stacks: calls `done` on the loop once every node of the
  // job has shared its evidence, or a few seconds after this node shared
  // its own; at once on one node. The agent stops its ranks then, not
  // before: a rank stopped while another node still takes its ranks' stacks
  // fails them (gloo's peers see the connection close), and their stacks
  // would show that failure instead of the hang.
  void after_other_nodes(std::function<void()> done);

  // Why worker `local_rank` (pid `pid`), killed by SIGKILL, died, if the
  // kernel's OOM killer did it; "" when nothing says so.
  std::string oom_evidence(int local_rank, pid_t pid) const;

 private:
  void arm();
  void on_sample();
  void judge(const std::vector<RankView>& all, const std::vector<RankView>& local);
  void note_stragglers(const std::vector<RankView>& all);
  std::vector<RankView> with_other_nodes(
      std::vector<RankView> local, const std::vector<std::optional<NodeStatus>>& statuses) const;

  boost::asio::io_context& io_;
  HangMonitorOptions o_;
  Hooks hooks_;
  ProgressWatch watch_;
  boost::asio::steady_timer timer_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for handlers posted back
  bool stopped_ = false;
  bool reading_ = false;               // node 0: the other nodes' views are being read
  std::vector<int> stragglers_;        // node 0: the stragglers last said
  std::string cgroup_;                 // the workers' memory cgroup (the agent's)
  int64_t oom_kills_ = -1;             // its OOM-kill counter as they started
  // A job of several nodes: how long after collect_stacks shared this node's
  // evidence it waits for the others' at most.
  std::chrono::steady_clock::time_point evidence_deadline_{};
};

}  // namespace ccrun::agent
