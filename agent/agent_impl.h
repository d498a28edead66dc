//===- agent_impl.h - The per-node agent's class (private to agent/) -*- C++ -*-//
//
// The per-node agent: hosts or joins the store, rendezvouses, runs the
// workers, and restarts or reports (see include/ccrun/agent.h, whose run()
// is this class's only user). Its members are defined by concern:
//   agent.cpp           the job's sequence, signals, and the loop that
//                       carries out each decision (round_decision.h)
//   agent_attempt.cpp   one attempt (attempt.h holds its state): the
//                       workers, their exits, round events
//   agent_hangs.cpp     hangs (--hang-timeout) and torch's FileTimer
//   agent_failures.cpp  failures collected and reported; the store lost;
//                       a stop by signal
//   agent_placement.cpp --numa-binding: each local rank's CPU and memory
//                       placement, planned once per job from hwloc's view
//   agent_event_log.cpp --event-log-handler: torch's end-of-run event
//   agent_warm.cpp      --warm-start: the node's template interpreter
//   agent_exclusion.cpp the health gate before each join, and exclusions
//                       (ccrun/exclusion.h): recorded, and sat out
//   agent_mpi.cpp       --mpi: the workers' PMI-1 server (mpi/pmi_server.h),
//                       and a rank's MPI_Abort as its failure
//
// One io_context carries every event of a node: worker exits (pidfds),
// worker output (pipes), stop signals (SignalStream), the rendezvous round's
// end (posted by the rendezvous watcher thread) and the completion of store
// calls. Store calls block (they may wait for other nodes, or reconnect to a
// store that is gone), so they never run on the io_context's thread: the
// agent's own sequence (setup, join, leave, close) runs them on a thread of
// their own while the io_context serves signals (run_off_loop), and calls
// made while workers run (the exit-barrier mark, a restart request) run as
// background tasks (StoreTasks). Every store client shares one
// StoreInterrupt: a stop signal triggers it, so no state (forming, running,
// stopping, exit barrier, leaving) waits for a store before it can stop.
//
// States of one node, in order:
//   kForming   joining a rendezvous round (run_off_loop)
//   kRunning   workers spawned; output flows through LogMux
//   kStopping  a failure here, an end of round elsewhere or a signal:
//              SIGTERM sent, SIGKILL after stop_grace
//   kBarrier   every local worker exited 0; waiting for the other nodes
//   kLeaving   the job is over here; the hosting node waits for the others
//              to read the end before it stops serving the store
//   kExcluded  the node is kept out of the job's rounds for a cool-down
//              (ccrun/exclusion.h); it follows the rounds, with no workers
//
// Signals: the first SIGINT/SIGTERM (or --signals-to-handle) stops the job
// for good, whatever state it is in: the signal goes to the workers, once
// (as torchrun sends it), then SIGKILL after stop_grace; no restart; exit
// 128+N. A second signal SIGKILLs the workers at once.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <utility>  // first: this Boost's asio/awaitable.hpp uses std::exchange unincluded

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ccrun/agent.h"
#include "ccrun/exclusion.h"
#include "ccrun/rendezvous.h"
#include "ccrun/store_interrupt.h"
#include "attempt.h"
#include "failure_report.h"
#include "gpu_health.h"
#include "file_timer.h"
#include "hang_monitor.h"
#include "job_store.h"
#include "log_mux.h"
#include "env_builder.h"
#include "node_environment.h"
#include "round_decision.h"
#include "run_logs.h"
#include "signal_stream.h"
#include "ccrun/python_command.h"
#include "startup_watch.h"
#include "step_series.h"
#include "warm_template.h"
#include "store_tasks.h"
#include "worker_group.h"
#include "worker_store.h"

namespace ccrun::agent {

// What the agent takes from outside: the seams its unit tests drive (as
// torchelastic's tests give its agent a fake rdzv_handler and a fake
// _start_workers). run() gives the real ones.
struct AgentParts {
  // An attempt's worker processes, their output written into `output`;
  // `agent_token` is the agent's CCRUN_AGENT_TOKEN (descendants.h).
  std::function<std::unique_ptr<Workers>(boost::asio::io_context& io, LogMux& output,
                                         const std::string& agent_token)>
      workers;
  // The rendezvous, given instead of the one the agent makes on the job's
  // store (hosted or joined): then no store is opened, and the health gate
  // has no store to ping. Empty: the job's store and its handler.
  std::function<std::unique_ptr<rendezvous::RendezvousHandler>()> rendezvous;
};

// One node's agent for one job; run() once.
class Agent {
 public:
  Agent(const JobSpec& spec, AgentParts parts);
  Agent(const Agent&) = delete;  // owns the io_context every handler captures `this` for
  Agent& operator=(const Agent&) = delete;

  // Runs the job to its end; the exit status ccrun returns.
  int run();

 private:
  using RendezvousInfo = rendezvous::RendezvousInfo;
  using RoundEvent = rendezvous::RoundEvent;
  using milliseconds = std::chrono::milliseconds;

  using Outcome = AttemptOutcome;
  // Where the node is (the overview above).
  enum class State { kForming, kRunning, kStopping, kBarrier, kLeaving, kExcluded };

  // The job's sequence, signals and the loop that carries out each decision (agent.cpp).
  // The one line every job ends with, and the last event.
  void summarize(int status);

  // The stop signals were blocked at load (ccrun/stop_signals.h); from
  // here they are events of the loop, also one that came before it ran.
  void setup_signals();

  // --exit-on-stdin-eof (agents started over ssh): the launching ccrun
  // holds our stdin open; EOF means it is gone (even SIGKILLed), so the
  // job stops here as on SIGTERM.
  void watch_stdin();

  // Waits for EOF on the dup of stdin watch_stdin made.
  void read_stdin();

  // Waits for the next stop signal (on_signal), again after each.
  void arm_signals();

  // Every state reacts here: store calls in flight are interrupted, the
  // workers stop, and the attempt's outcome is kSignalled (never a restart).
  void on_signal(int signo);

  // What the node is doing (state_), for messages.
  const char* state_name() const;

  // Runs `fn` on a thread of its own while the io_context serves signals
  // and whatever else is pending; rethrows what `fn` threw. A signal
  // interrupts the store calls of `fn` (InterruptedError).
  void run_off_loop(const std::function<void()>& fn);

  // Like run_off_loop for best-effort calls after a stop: bounded by
  // `timeout` (then interrupted) and by a further signal.
  void run_bounded(const std::function<void()>& fn, milliseconds timeout);

  // The rendezvous options both kinds of store share.
  rendezvous::RendezvousOptions rendezvous_options(uint16_t master_port) const;

  // Hosts or joins the job's store, and makes the rendezvous on it.
  void setup_store();

  // The job store's host:port, for messages.
  std::string store_endpoint() const;

  // The attempts: join a round, run it, carry out decide()'s action
  // (round_decision.h); returns the exit status.
  int loop();

  // Hosts or joins the store (said once when it does not answer at once:
  // another node's agent starts later, a host name does not resolve yet),
  // then opens the run's log directory and the FileTimer.
  void start_job();

  // --numa-binding: every local rank's CPUs and memory nodes, planned once
  // per job from hwloc's topology (agent_placement.cpp) and said; throws
  // ccrun::Error naming the cause when a rank cannot be bound.
  void plan_placements();

  // --duplicate-stdout/stderr-filters: this attempt's filtered_{stdout,
  // stderr}.log under the run's directory (filtered_), opened when asked for.
  void open_filtered_logs();
  // --collapse-output: this attempt's collapsers of stdout and stderr.
  void open_collapsers();

  // --event-log-handler console: torch's end-of-run event, one JSON line on
  // stderr (agent_event_log.cpp); null and dynamic_rendezvous drop it.
  void record_end_event(int status) const;

  // Joins the next rendezvous round (info_), and says so.
  void join_round();

  // The attempt's outcome as the decision takes it: a round event, or a
  // failure of this node's own workers (a restart request with its report).
  AttemptEnd end_of(Outcome outcome) const;

  void say_why_the_group_stops(const AttemptEnd& end);

  // The job ends here for good: the report, then the other nodes are told.
  int fail_job(const std::string& reason, int exit_status = 1);

  // With --log-dir: the failed attempt's incident folder (incident.h), said.
  void keep_incident();
  // Exclusions and the health gate (agent_exclusion.cpp).
  // Before each join: an exclusion of this host in the job's store (this
  // agent's, or an earlier agent's on this host) is sat out, then the gate
  // runs. A failed gate excludes the node from an elastic job (sat out in
  // turn), and closes a static job, which cannot form without it (throws).
  // Returns -1 to join, else the exit status: the job ended meanwhile.
  int clear_to_join();
  // The health gate (health_gate.h): the reason it failed, nullopt when passed.
  std::optional<std::string> run_health_gate_once();
  // Records this node's exclusion for `reason` (the job's store, an
  // `excluded` event, a marked line for a fan-out's launcher) and says it.
  Exclusion exclude_self(const std::string& reason);
  // This host's exclusion whose cool-down has not ended, if any.
  std::optional<Exclusion> my_exclusion();
  // Whether the job can go on while this node sits out: an elastic job of
  // more than one node (a static one, or a one-node job, cannot form without it).
  bool can_sit_out() const;
  // This node as a message names it before a round: "node 3 (host)" where
  // node ranks are given (static), "node host" where a round gives them.
  std::string node_before_round(const std::string& host) const;
  // Waits out `e` with no place in the rounds: -1 when its cool-down ended,
  // else the exit status (the job ended meanwhile).
  int sit_out(const Exclusion& e);
  // After an attempt: whether this node's workers caused its end
  // kExcludeAfterFailures times in a row and it asked to leave (tell_restart).
  bool excluded_by_failures(const AttemptEnd& end);
  // Says a restart is coming and logs it; `counts` takes one from the budget.
  void note_restart(bool counts, const AttemptEnd& end, RestartBudget& budget);

  // Releases everything in order; a hosted store stops serving last but one.
  void cleanup();

  // One attempt: the workers, their exits and the round's events (agent_attempt.cpp).
  // One attempt: this node's workers run until the round ends for them.
  Outcome run_attempt();

  // Local rank `lr`'s program, environment and output in this attempt.
  WorkerSpec worker_spec(int lr);
  // The workers read this process's stdin, as torchrun's do (not a
  // fanned-out agent's: its stdin is its link to the launching ccrun).
  bool workers_read_stdin() const;

  // A worker that cannot start fails the attempt here, like a worker that
  // exits: the other nodes are told, the started ones stopped.
  // Spawns the attempt's workers, building each spec as it goes; `starter`
  // forks them from the warm template (null: cold).
  void start_workers(WorkerStarter* starter);

  // A failure of this node with no worker to name (yet): host, time, attempt,
  // and the most steps a rank of `local` (this node's views) made in this
  // attempt; -1 when none reports (Failure::steps).
  Failure node_failure(const std::string& message, const std::vector<RankView>& local) const;
  // This node's rank views now; none before the attempt's monitor exists.
  std::vector<RankView> local_views() const;

  // Asks the other nodes to restart, off the loop (StoreTasks).
  void tell_restart(const Failure& f);

  // A worker exited: all of them 0 reaches the exit barrier; a failure
  // stops the group and asks for a restart; a lone worker that held the
  // terminal (terminal_lease.h) and died of its Ctrl-C stops the job.
  void on_worker_exit(const WorkerExit& e);

  // --mpi (agent_mpi.cpp): the attempt's PMI-1 server, for the round the
  // node joined (info_); null without --mpi.
  std::unique_ptr<mpi::PmiServer> make_pmi_server();
  // Local rank `lr` called MPI_Abort: it is ended (as mpiexec ends it), and
  // its failure carries `exit_code`.
  void on_mpi_abort(int lr, int exit_code, const std::string& message);
  // A rank ended after its MPI_Abort: the failure says so, with its code.
  void name_mpi_abort(Failure& f) const;
  // Local rank `lr`'s --mpi variables: its PMI ones, and the PMPI library
  // that records its MPI calls (libccrun_mpi_progress.so) before LD_PRELOAD.
  void add_mpi_environment(EnvBuilder& env, int lr) const;

  // A SIGKILL nobody in ccrun sent: was it the kernel's OOM killer?
  void name_oom_kill(Failure& f) const;
  // A rank that died inside a collective its group's members issued with
  // another op or size (gloo aborts a rank, not always the one that differs):
  // the desync goes first in the failure's message (desync_at_failure).
  void name_desync(Failure& f, const std::vector<RankView>& local) const;

  // The round ended elsewhere (or all nodes are done): stop this node's
  // workers, after their stacks when node 0 judged the job hung.
  void on_round_event(const RoundEvent& ev);

  // The current attempt's outcome; the first one stands.
  void finish(Outcome o) { attempt_->finish(o); }

  // --warm-start (agent_warm.cpp). Starts the node's template (imports in
  // the background), unless the program is not a Python command.
  void start_template();
  // The attempt's starter: the template once it is ready and can fork, else
  // null (the attempt starts cold, and says why).
  WorkerStarter* warm_starter();
  // A template that cannot fork any more is replaced, in the background.
  void renew_template();
  // The installed packages the workers imported go to the template.
  void preload_imports();

  // Every local rank took its first step: the attempt's start-up line
  // (startup_timeline.h), kept for the summary, and a `startup` event per rank.
  void on_started(const std::vector<StartupTimeline>& ranks);

  // What this attempt's start-up is measured from: the launch, or the
  // failure (else the end) of the attempt before.
  StartupReference startup_reference() const;

  // Hangs (--hang-timeout) and torch's FileTimer (agent_hangs.cpp).
  // torch's watchdog protocol, as its LocalElasticAgent serves it: with
  // TORCHELASTIC_ENABLE_FILE_TIMER=1 (node_env_) the workers get TORCHELASTIC_TIMER_FILE
  // (the given one, or a new FIFO), and a FileTimerClient deadline that
  // passes kills its process, named in the report.
  void serve_file_timer();

  // Where torch's NCCL flight recorders put their FIFOs and dumps: the
  // attempt's log folder, else /tmp/ccrun-<token>-nccl_... (no folder to
  // make or remove: torch removes its FIFOs, and dumps are kept evidence).
  std::string evidence_prefix() const;

  // What --hang-timeout watches in this attempt (hang_monitor.h); a hang
  // comes back to on_hang.
  std::unique_ptr<HangMonitor> make_monitor();

  // A hang (judged here, on node 0): the verdict now, then this node's
  // ranks' stacks, then the group fails like any failure; the failure names
  // the culprit, wherever it runs, and the other nodes take their ranks'
  // stacks when they read it (on_round_event).
  void on_hang(const HangVerdict& v, const std::vector<RankView>& all,
               const std::vector<RankView>& local, const RankView& culprit);

  // Stops this node's workers once their stacks are taken; `then` runs
  // first, with the evidence, once the stacks are in.
  void stop_with_stacks(const std::vector<RankView>& local,
                        std::function<void(const HangEvidence&)> then, Outcome outcome);

  // Failures: collected, reported, and the ends that are not a decision's (agent_failures.cpp).
  // The failures of the attempt that just ended, kept for the report.
  void collect_failures();

  // Only this node's failures (the store cannot be read).
  void collect_failures_local();

  // The failure report: on stderr (marked for a fan-out) and as
  // failure_report.json in the log directory.
  void report(const std::string& reason);

  // When ccrun itself runs with TORCHELASTIC_ERROR_FILE set (a scheduler set
  // it), the root cause's error record is written there, as torchrun does.
  void write_launcher_error_file(const std::vector<Failure>& final);
  // When no worker's record was written: ccrun's own error (end_reason_, of
  // type end_error_type_) or the signal that stopped it (status 128+N).
  void write_own_error_file(int status);

  // The store stopped answering for the keep-alive window: nothing can be
  // agreed with the other nodes any more, so this node ends now.
  int store_lost(const std::string& detail);

  // The job was stopped by a signal: the other nodes are told (bounded by
  // kCloseOnSignalTimeout); returns 128 + the signal.
  int exit_signalled();

  const JobSpec& spec_;
  const NodeEnvironment node_env_;  // read once, at the start
  AgentParts parts_;
  boost::asio::io_context io_{1};
  std::unique_ptr<SignalStream> signals_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> stdin_;
  std::array<char, 256> stdin_buf_;
  int signalled_ = 0;
  bool signalled_again_ = false;
  std::string agent_token_;
  std::shared_ptr<store::StoreInterrupt> interrupt_;
  State state_ = State::kForming;

  StorePlan store_plan_;  // where the job's store is, who serves it
  JobStore store_;  // hosted here or joined
  std::unique_ptr<WorkerStore> worker_store_;  // dynamic: the workers' store, if shared
  std::unique_ptr<rendezvous::RendezvousHandler> rdzv_;
  std::string run_id_ = "none", local_addr_, gloo_ifname_;
  std::unique_ptr<RunLogs> run_logs_;  // the run's log directory (--log-dir)
  std::unique_ptr<StepSeries> steps_;  // with --log-dir: each rank's steps over time (steps.jsonl)
  std::vector<Placement> placements_;  // by local rank (--numa-binding); empty = none
  bool agent_error_ = false;  // the agent itself failed (not its workers)

  RendezvousInfo info_;
  int restart_count_ = 0;
  int generation_ = 0;  // attempts started; stale round events are dropped
  std::unique_ptr<Attempt> attempt_;  // the current attempt, or the last one once it ended
  std::vector<std::string> startup_lines_;   // one per attempt that got that far
  int64_t attempt_ended_ms_ = 0;             // wall clock: the last attempt's end here
  std::unique_ptr<WarmTemplate> warm_;       // --warm-start: the node's template
  std::optional<PythonCommand> python_;      // what the workers' command line runs
  bool warm_off_ = false;               // --warm-start cannot apply: cold throughout
  std::set<std::string> preloaded_;          // what the workers imported, given to the template
  bool preload_broke_ = false;               // a template broke after such a preload
  std::vector<std::string> incidents_;       // the incident folders written (incident.h)
  std::unique_ptr<FileTimerServer> file_timer_;  // TORCHELASTIC_ENABLE_FILE_TIMER=1
  std::map<pid_t, std::string> timer_kills_;     // pids the FileTimer killed, and why
  std::vector<Failure> last_failures_, all_failures_;
  // Exclusions: attempts in a row ended by this node's failure
  // (round_decision.h), whether its last restart request left the job, and
  // the records when there is no job store (a given rendezvous).
  int failure_streak_ = 0;
  std::atomic<bool> leaving_{false};
  ExclusionList local_exclusions_;
  bool exclusion_file_read_ = false;  // spec_.exclusion_file, once before the first join
  std::unique_ptr<GpuChecks> gpu_checks_;  // NVML, opened at the first gate (gpu_health.h)
  int attempts_ = 0;  // rendezvous rounds that started workers (or would have)
  std::string end_reason_;
  std::string end_error_type_ = "ccrun::Error";  // the type of what ended the job
  bool error_file_written_ = false;              // TORCHELASTIC_ERROR_FILE has a record
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace ccrun::agent
