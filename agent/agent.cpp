// The per-node agent: hosts or joins the store, rendezvouses, runs the
// workers, and restarts or reports (see include/ccrun/agent.h).
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
//
// Signals: the first SIGINT/SIGTERM (or --signals-to-handle) stops the job
// for good, whatever state it is in: the signal goes to the workers, once
// (as torchrun sends it), then SIGKILL after stop_grace; no restart; exit
// 128+N. A second signal SIGKILLs the workers at once.
#include "ccrun/agent.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <utility>

#include "ccrun/endpoint.h"
#include "ccrun/error.h"
#include "ccrun/host_name.h"
#include "ccrun/rendezvous.h"
#include "ccrun/signal_names.h"
#include "ccrun/store_interrupt.h"
#include "descendants.h"
#include "failure_report.h"
#include "file_timer.h"
#include "hang_monitor.h"
#include "job_store.h"
#include "orphan_killer.h"
#include "log_mux.h"
#include "run_logs.h"
#include "signal_stream.h"
#include "round_decision.h"
#include "store_tasks.h"
#include "worker_env.h"
#include "worker_group.h"

namespace ccrun::agent {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using rendezvous::RendezvousInfo;
using rendezvous::RoundEvent;
using std::chrono::milliseconds;

// How long a signalled agent tries to tell the other nodes it stopped.
constexpr milliseconds kCloseOnSignalTimeout{3'000};

int64_t now_ms() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string random_hex(int words) {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < words; ++i) {
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x", rd());
    out += buf;
  }
  return out;
}

class Agent {
 public:
  explicit Agent(const JobSpec& spec)
      : spec_(spec), agent_token_(random_hex(4)) {}

  int run() {
    OrphanKiller::start(agent_token_);  // forked before any thread of ours exists
    setup_signals();
    interrupt_ = std::make_shared<store::StoreInterrupt>();
    if (spec_.exit_on_stdin_eof) watch_stdin();
    if (spec_.nproc_per_node > 1 && !std::getenv("OMP_NUM_THREADS")) {
      std::fprintf(stderr,
                   "ccrun: setting OMP_NUM_THREADS environment variable for each process to "
                   "be 1 in default, to avoid your system being overloaded, please further "
                   "tune the variable for optimal performance in your application as needed.\n");
    }
    int status = 1;
    try {
      status = loop();
    } catch (const InterruptedError&) {
      status = exit_signalled();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ccrun: %s\n", e.what());
      end_reason_ = e.what();
      status = signalled_ ? exit_signalled() : 1;
    }
    summarize(status);
    cleanup();
    return status;
  }

 private:
  enum class Outcome { kSucceeded, kFailedHere, kRoundEnded, kSignalled };

  // The one line every job ends with, and the last event.
  void summarize(int status) {
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    const char* how = status == 0 ? "succeeded" : status > 128 ? "was stopped" : "failed";
    spdlog::info("ccrun: job '{}' {} (exit {}) after {:.1f}s: {} attempt(s), {} node(s), {} rank(s)",
                 run_id_, how, status, wall, attempts_, info_.num_nodes, info_.world_size);
    if (run_logs_) {
      run_logs_->event("stop", restart_count_,
                       nlohmann::json{{"exit_code", status}, {"wall_s", wall},
                                      {"reason", status == 0 ? "all workers exited 0" : end_reason_},
                                      {"attempts", attempts_}}
                           .dump());
    }
  }
  enum class State { kForming, kRunning, kStopping, kBarrier, kLeaving };

  // The stop signals were blocked at load (ccrun/stop_signals.h); from
  // here they are events of the loop, also one that came before it ran.
  void setup_signals() {
    std::vector<int> handled = {SIGINT, SIGTERM};
    for (const auto& n : spec_.signals_to_handle) {
      if (int s = signal_number(n)) handled.push_back(s);
    }
    ::signal(SIGPIPE, SIG_IGN);
    signals_ = std::make_unique<SignalStream>(io_, handled);
    arm_signals();
  }

  // --exit-on-stdin-eof (agents started over ssh): the launching ccrun
  // holds our stdin open; EOF means it is gone (even SIGKILLed), so the
  // job stops here as on SIGTERM.
  void watch_stdin() {
    int fd = ::dup(0);
    if (fd < 0) return;
    stdin_ = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
    read_stdin();
  }

  void read_stdin() {
    stdin_->async_read_some(asio::buffer(stdin_buf_), [this](boost::system::error_code ec, size_t) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) {
        spdlog::warn("ccrun: the launching ccrun is gone (stdin closed); stopping");
        on_signal(SIGTERM);
        return;
      }
      read_stdin();  // bytes on stdin mean nothing: keep waiting for EOF
    });
  }

  void arm_signals() {
    signals_->async_wait([this](int signo) {
      on_signal(signo);
      arm_signals();
    });
  }

  // Every state reacts here: store calls in flight are interrupted, the
  // workers stop, and the attempt's outcome is kSignalled (never a restart).
  void on_signal(int signo) {
    if (signalled_ != 0) {
      spdlog::warn("ccrun: received {} again; killing the workers now", signal_name(signo));
      signalled_again_ = true;
      interrupt_->trigger();
      if (group_) group_->kill_now();
      return;
    }
    signalled_ = signo;
    spdlog::warn("ccrun: received {} while {}; stopping{}", signal_name(signo), state_name(),
                 group_ && group_->running() > 0
                     ? " the workers (SIGKILL after " +
                           std::to_string(spec_.stop_grace.count() / 1000) + "s)"
                     : "");
    interrupt_->trigger();
    stopping_ = true;
    if (group_ && group_->running() > 0) {
      // The workers get the signal itself, once (a script that saves a
      // checkpoint on KeyboardInterrupt must not be cut short by a SIGTERM
      // right behind it), and SIGKILL after stop_grace, as torchrun does. A
      // stop already under way (a failure) keeps its grace period.
      if (group_->stopping()) group_->signal_all(signo);
      group_->stop(spec_.stop_grace, [this] { finish(Outcome::kSignalled); }, signo);
    } else {
      finish(Outcome::kSignalled);
    }
  }

  const char* state_name() const {
    switch (state_) {
      case State::kForming: return "waiting for the other nodes";
      case State::kRunning: return "running the workers";
      case State::kStopping: return "stopping the workers";
      case State::kBarrier: return "waiting at the exit barrier";
      case State::kLeaving: return "leaving the job";
    }
    return "running";
  }

  // Runs `fn` on a thread of its own while the io_context serves signals
  // and whatever else is pending; rethrows what `fn` threw. A signal
  // interrupts the store calls of `fn` (InterruptedError).
  void run_off_loop(const std::function<void()>& fn) {
    std::exception_ptr error;
    bool done = false;
    std::thread t([&] {
      try {
        fn();
      } catch (...) {
        error = std::current_exception();
      }
      asio::post(io_, [&done] { done = true; });
    });
    io_.restart();
    while (!done) io_.run_one();
    t.join();
    if (error) std::rethrow_exception(error);
  }

  // Like run_off_loop for best-effort calls after a stop: bounded by
  // `timeout` (then interrupted) and by a further signal.
  void run_bounded(const std::function<void()>& fn, milliseconds timeout) {
    interrupt_->reset();
    if (signalled_again_) return;
    asio::steady_timer deadline(io_, timeout);
    deadline.async_wait([this](boost::system::error_code ec) {
      if (!ec) interrupt_->trigger();
    });
    try {
      run_off_loop(fn);
    } catch (const std::exception& e) {
      spdlog::debug("ccrun: {}", e.what());
    }
    deadline.cancel();
  }

  // The rendezvous options both kinds of store share.
  rendezvous::RendezvousOptions rendezvous_options(uint16_t master_port) const {
    const auto& r = spec_.rdzv;
    rendezvous::RendezvousOptions ro;
    ro.run_id = run_id_;
    static_cast<RendezvousTiming&>(ro) = r;
    ro.backend = spec_.standalone ? rendezvous::Backend::kC10d : r.backend;
    ro.min_nodes = spec_.min_nodes;
    ro.max_nodes = spec_.max_nodes;
    ro.node_rank = spec_.node_rank;
    ro.local_world_size = spec_.nproc_per_node;
    ro.local_addr = local_addr_;
    ro.master_addr = spec_.master_addr;
    ro.master_port = master_port;
    return ro;
  }

  // Hosts or joins the job's store, and makes the rendezvous on it.
  void setup_store() {
    store_ = open_job_store(spec_, interrupt_);
    local_addr_ = store_.local_addr;
    gloo_ifname_ = interface_of(local_addr_);
    run_id_ = spec_.standalone && spec_.rdzv.id == "none" ? random_hex(2) : spec_.rdzv.id;
    rdzv_ = rendezvous::create_rendezvous_handler(rendezvous_options(store_.master_port),
                                                  store_.connector());
  }

  std::string store_endpoint() const {
    return store_.endpoint.to_string();
  }

  int loop() {
    start_job();
    RestartBudget budget{spec_.max_restarts, spec_.max_restarts,
                         spec_.rdzv.backend == rendezvous::Backend::kStatic, 1, spec_.min_nodes};
    for (;;) {
      join_round();
      AttemptEnd end = end_of(run_attempt());
      if (end.how == AttemptEnd::How::kRoundEnded) say_why_the_group_stops(end);
      budget.num_nodes = info_.num_nodes;
      Decision d = decide(end, budget);
      switch (d.action) {
        case Decision::Action::kStop:
          return exit_signalled();
        case Decision::Action::kLeave:
          state_ = State::kLeaving;
          run_off_loop([this] { rdzv_->leave(store_.server != nullptr, milliseconds(60'000)); });
          return 0;
        case Decision::Action::kStoreLost:
          return store_lost(d.reason);
        case Decision::Action::kFail:
          collect_failures();
          return fail_job(d.reason);
        case Decision::Action::kRestart:
        case Decision::Action::kRejoin:
          collect_failures();
          note_restart(d.action == Decision::Action::kRestart, end.detail, budget);
          break;
      }
    }
  }

  // Hosts or joins the store (said once when it does not answer at once:
  // another node's agent starts later, a host name does not resolve yet),
  // then opens the run's log directory and the FileTimer.
  void start_job() {
    state_ = State::kForming;
    asio::steady_timer slow(io_, std::chrono::seconds(5));
    slow.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      spdlog::warn("ccrun: no answer yet from the store at {}; retrying for up to {}s "
                   "(--rdzv-conf join_timeout)",
                   store_address_hint(spec_), spec_.rdzv.join_timeout.count() / 1000);
    });
    run_off_loop([this] { setup_store(); });
    slow.cancel();
    run_logs_ = std::make_unique<RunLogs>(spec_.logs.log_dir, run_id_);
    serve_file_timer();
    if (run_logs_->kept()) spdlog::info("ccrun: logs in {}", run_logs_->root().string());
  }

  void join_round() {
    state_ = State::kForming;
    run_off_loop([this] { info_ = rdzv_->next_rendezvous(); });
    ++attempts_;
    std::string master = store::Endpoint{info_.master_addr, uint16_t(info_.master_port)}.to_string();
    run_logs_->event("join", restart_count_,
                     nlohmann::json{{"round", info_.round}, {"node_rank", info_.node_rank},
                                    {"nodes", info_.num_nodes}, {"world_size", info_.world_size},
                                    {"master", master}}
                         .dump());
    spdlog::info("ccrun: attempt {} (round {}): node {} of {}, ranks {}..{} of {}, master {}",
                 restart_count_, info_.round, info_.node_rank, info_.num_nodes,
                 info_.rank_offset, info_.rank_offset + spec_.nproc_per_node - 1,
                 info_.world_size, master);
  }

  // The attempt's outcome as the decision takes it: a round event, or a
  // failure of this node's own workers (a restart request with its report).
  AttemptEnd end_of(Outcome outcome) const {
    if (outcome == Outcome::kSignalled || signalled_) return AttemptEnd::signalled();
    if (outcome == Outcome::kSucceeded) return AttemptEnd::succeeded();
    if (event_) return AttemptEnd::round_ended(event_->kind, event_->detail);
    return AttemptEnd::round_ended(RoundEndKind::kRestartRequested,  // a failure here
                                   local_failures_.empty() ? "" : local_failures_.front().to_json());
  }

  void say_why_the_group_stops(const AttemptEnd& end) {
    if (end.kind == RoundEndKind::kNodeDead) {
      dead_node_ = event_;
      spdlog::warn("ccrun: the group stops: {}", end.detail);
    }
    if (end.kind != RoundEndKind::kRestartRequested || end.detail.empty()) return;
    Failure f = Failure::from_json(end.detail);
    std::string how = f.cause == "hang" ? "hung"
                      : f.signal        ? signal_name(f.signal)
                                        : "exit code " + std::to_string(f.exit_code);
    if (f.cause == "oom") how += ", the kernel's OOM killer";
    spdlog::warn("ccrun: the group stops: node {} rank {} failed ({}, pid {})", f.node_rank,
                 f.rank, how, f.pid);
  }

  // The job ends here for good: the report, then the other nodes are told.
  int fail_job(const std::string& reason) {
    end_reason_ = reason;
    report(reason);
    state_ = State::kLeaving;
    run_off_loop([&] {
      rdzv_->set_closed({reason, 0});
      rdzv_->leave(store_.server != nullptr, milliseconds(10'000));
    });
    return 1;
  }

  void note_restart(bool counts, const std::string& why, RestartBudget& budget) {
    if (counts) {
      --budget.restarts_left;
      ++restart_count_;
      spdlog::warn("ccrun: restarting the workers ({} restart(s) left)", budget.restarts_left);
    } else {
      spdlog::info("ccrun: membership changed; restarting the workers in a new round");
    }
    run_logs_->event("restart", restart_count_,
                     nlohmann::json{{"restarts_left", budget.restarts_left}, {"counts", counts},
                                    {"why", why.substr(0, 2000)}}
                         .dump());
  }

  // The store stopped answering for the keep-alive window: nothing can be
  // agreed with the other nodes any more, so this node ends now.
  int store_lost(const std::string& detail) {
    end_reason_ = "lost the store " + store_endpoint() + ": " + detail;
    std::string what = lost_in_barrier_
                           ? "at the exit barrier (this node's workers all exited 0; the other "
                             "nodes' outcome is unknown)"
                           : "while the workers ran";
    std::fprintf(stderr,
                 "ccrun: lost the store %s %s: %s; no answer for %llds, giving up. Was "
                 "ccrun-rendezvous (or the agent hosting the store) stopped? A restarted "
                 "ccrun-rendezvous starts empty; restart the job.\n",
                 store_endpoint().c_str(), what.c_str(), detail.c_str(),
                 static_cast<long long>(
                     (spec_.rdzv.keep_alive_interval * spec_.rdzv.keep_alive_max_attempt).count() /
                     1000));
    collect_failures_local();
    if (!all_failures_.empty()) report("lost the store " + store_endpoint());
    return 1;
  }

  int exit_signalled() {
    std::string reason = "ccrun received " + signal_name(signalled_) + " on node " +
                         std::to_string(info_.node_rank);
    end_reason_ = reason;
    if (rdzv_) {
      state_ = State::kLeaving;
      run_bounded([&] { rdzv_->set_closed({reason, signalled_}); }, kCloseOnSignalTimeout);
    }
    return 128 + signalled_;
  }

  // One attempt: this node's workers run until the round ends for them.
  Outcome run_attempt() {
    event_.reset();
    local_failures_.clear();
    outcome_.reset();
    stopping_ = signalled_ != 0;
    lost_in_barrier_ = false;
    exited_ok_ = 0;
    ++generation_;
    state_ = State::kRunning;
    output_ = std::make_unique<LogMux>(io_);
    group_ = std::make_unique<WorkerGroup>(io_, *output_, agent_token_);
    tasks_ = std::make_unique<StoreTasks>(io_);
    hang_ = nullptr;
    monitor_.reset();
    monitor_ = make_monitor();
    std::vector<WorkerSpec> specs;
    for (int lr = 0; lr < spec_.nproc_per_node; ++lr) specs.push_back(worker_spec(lr));
    if (signalled_) {
      outcome_ = Outcome::kSignalled;
    } else {
      start_workers(specs);
    }
    int gen = generation_;
    rdzv_->set_attempt(restart_count_);
    rdzv_->watch([this, gen](const RoundEvent& ev) {
      asio::post(io_, [this, gen, ev] {
        if (gen == generation_) on_round_event(ev);
      });
    });
    io_.restart();
    while (!outcome_) io_.run_one();
    monitor_->stop();
    // The watcher and the store tasks may be blocked on the store: wait for
    // them while signals are still served (a signal interrupts them).
    run_off_loop([this] {
      rdzv_->shutdown();
      tasks_->join();
    });
    if (signalled_) outcome_ = Outcome::kSignalled;
    Outcome o = *outcome_;
    group_.reset();
    return o;
  }

  // Local rank `lr`'s program, environment and output in this attempt.
  WorkerSpec worker_spec(int lr) {
    WorkerSpec w;
    w.local_rank = lr;
    w.rank = info_.rank_offset + lr;
    fs::path dir = run_logs_->rank_dir(restart_count_, w.rank);
    std::string error_file = (dir / "error.json").string();
    std::error_code ec;
    fs::remove(error_file, ec);
    EnvContext ctx{&spec_, &info_, run_id_, restart_count_, store_.etcd ? "" : store_.endpoint.host,
                   store_.endpoint.port, gloo_ifname_};
    w.argv = spec_.entrypoint;
    w.env = worker_environment(ctx, lr, error_file);
    w.token = agent_token_ + "." + std::to_string(restart_count_) + "." + std::to_string(lr);
    w.env.push_back(std::string(kAgentTokenVar) + "=" + w.token);
    monitor_->add_worker_env(w.env, lr);
    if (file_timer_) w.env.push_back("TORCHELASTIC_TIMER_FILE=" + file_timer_->path());
    auto it = spec_.logs.redirects.find(lr);
    int redirect = it == spec_.logs.redirects.end() ? spec_.logs.default_redirects : it->second;
    bool shown = spec_.logs.local_ranks_filter.empty() || spec_.logs.local_ranks_filter.count(lr);
    bool files = run_logs_->kept();
    for (int fd : {1, 2}) {
      StreamOptions& o = fd == 1 ? w.out : w.err;
      o.prefix = spec_.logs.prefix_lines ? "[" + std::to_string(w.rank) + "]:" : "";
      o.to_console = shown && !(redirect & fd);  // bit 1: stdout, bit 2: stderr
      o.console_fd = fd;
      o.file = files ? (dir / (fd == 1 ? "stdout.log" : "stderr.log")).string() : "";
    }
    return w;
  }

  // A worker that cannot start fails the attempt here, like a worker that
  // exits: the other nodes are told, the started ones stopped.
  void start_workers(const std::vector<WorkerSpec>& specs) {
    try {
      group_->start(specs, [this](const WorkerExit& e) { on_worker_exit(e); });
      monitor_->start(group_->pids());
      run_logs_->event("start", restart_count_,
                       nlohmann::json{{"first_rank", info_.rank_offset},
                                      {"workers", spec_.nproc_per_node}}
                           .dump());
    } catch (const Error& e) {
      std::fprintf(stderr, "ccrun: %s\n", e.what());
      Failure f = node_failure(e.what());
      local_failures_.push_back(f);
      tell_restart(f);
      stopping_ = true;
      group_->stop(spec_.stop_grace, [this] { finish(Outcome::kFailedHere); });
    }
  }

  // torch's watchdog protocol, as its LocalElasticAgent serves it: with
  // TORCHELASTIC_ENABLE_FILE_TIMER=1 the workers get TORCHELASTIC_TIMER_FILE
  // (the given one, or a new FIFO), and a FileTimerClient deadline that
  // passes kills its process, named in the report.
  void serve_file_timer() {
    const char* on = std::getenv("TORCHELASTIC_ENABLE_FILE_TIMER");
    if (!on || std::string(on) != "1") return;
    const char* given = std::getenv("TORCHELASTIC_TIMER_FILE");
    std::string path = given && *given ? given : "/tmp/watchdog_timer_" + agent_token_;
    file_timer_ = std::make_unique<FileTimerServer>(io_, path, [this](const FileTimerKill& k) {
      std::string scopes;
      for (const auto& s : k.scopes) scopes += (scopes.empty() ? "" : ", ") + s;
      spdlog::error("ccrun: torch's FileTimer expired for pid {} (scope {}); sent it {}", k.pid,
                    scopes, signal_name(k.signal));
      timer_kills_[k.pid] = "torch's FileTimer expired (scope " + scopes + "): ccrun sent " +
                            signal_name(k.signal) + ", as torch's LocalElasticAgent does";
    });
  }

  // Where torch's NCCL flight recorders put their FIFOs and dumps: the
  // attempt's log folder, else /tmp/ccrun-<token>-nccl_... (no folder to
  // make or remove: torch removes its FIFOs, and dumps are kept evidence).
  std::string evidence_prefix() const {
    if (run_logs_->kept()) {
      return (run_logs_->root() / ("attempt_" + std::to_string(restart_count_))).string() + "/";
    }
    return (fs::temp_directory_path() / ("ccrun-" + agent_token_ + "-")).string();
  }

  // What --hang-timeout watches in this attempt (hang_monitor.h); a hang
  // comes back to on_hang.
  std::unique_ptr<HangMonitor> make_monitor() {
    HangMonitorOptions o;
    o.hang_timeout = spec_.hang_timeout;
    o.node_rank = info_.node_rank, o.num_nodes = info_.num_nodes;
    o.first_rank = info_.rank_offset, o.nproc = spec_.nproc_per_node;
    o.attempt = restart_count_, o.host = host_name(), o.token = agent_token_;
    o.evidence_prefix = evidence_prefix();
    HangMonitor::Hooks h;
    h.publish = [this](const std::string& ranks) { rdzv_->set_progress(ranks); };
    h.read_statuses = [rdzv = rdzv_.get()] { return rdzv->node_statuses(); };
    h.off_loop = [this](std::function<void()> call) {
      tasks_->run(std::move(call), [](const std::string& what) {
        spdlog::error("ccrun: hang monitor: {}", what);
      });
    };
    h.on_hang = [this](const HangVerdict& v, const std::vector<RankView>& all,
                       const std::vector<RankView>& local, const RankView& culprit) {
      if (!stopping_ && !outcome_) on_hang(v, all, local, culprit);  // else a stop is under way
    };
    h.event = [this](const std::string& name, const std::string& json) {
      run_logs_->event(name, restart_count_, json);
    };
    return std::make_unique<HangMonitor>(io_, o, h);
  }

  // A hang (judged here, on node 0): the verdict now, then this node's
  // ranks' stacks, then the group fails like any failure; the failure names
  // the culprit, wherever it runs, and the other nodes take their ranks'
  // stacks when they read it (on_round_event).
  void on_hang(const HangVerdict& v, const std::vector<RankView>& all,
               const std::vector<RankView>& local, const RankView& culprit) {
    spdlog::error("ccrun: the job is hung (--hang-timeout {}): {}",
                  format_duration(spec_.hang_timeout), v.headline);
    for (const auto& line : v.lines) spdlog::error("ccrun:   {}", line);
    hang_ = v.to_json();
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& r : all) ranks.push_back(r.to_json());
    hang_["progress"] = ranks;
    run_logs_->event("hang", restart_count_, hang_.dump());
    Failure f = node_failure("hang: " + v.headline);
    f.cause = "hang";
    if (culprit.rank >= 0) {
      f.rank = culprit.rank, f.local_rank = culprit.local_rank, f.pid = culprit.pid;
      f.node_rank = culprit.node_rank, f.hostname = culprit.host;
    }
    local_failures_.push_back(f);
    run_logs_->event("failure", restart_count_, f.to_json());
    stop_with_stacks(local, [this, f] { tell_restart(f); }, Outcome::kFailedHere);
  }

  // Stops this node's workers once their stacks are taken; `then` runs
  // first, once the stacks are in.
  void stop_with_stacks(const std::vector<RankView>& local, std::function<void()> then,
                        Outcome outcome) {
    stopping_ = true;
    state_ = State::kStopping;
    monitor_->stop();
    int gen = generation_;
    monitor_->collect_stacks(local, [this, gen, then, outcome](nlohmann::json stacks) {
      if (gen != generation_ || outcome_) return;
      if (hang_.is_null()) hang_ = nlohmann::json::object();
      hang_["stacks"] = stacks;
      run_logs_->event("hang_stacks", restart_count_, nlohmann::json{{"stacks", stacks}}.dump());
      then();
      group_->stop(spec_.stop_grace, [this, outcome] { finish(outcome); });
    });
  }

  Failure node_failure(const std::string& message) const {
    Failure f;
    f.node_rank = info_.node_rank;
    f.hostname = host_name();
    f.addr = local_addr_;
    f.time_ms = now_ms();
    f.attempt = restart_count_;
    f.message = message;
    return f;
  }

  void tell_restart(const Failure& f) {
    std::string json = f.to_json();
    tasks_->run([this, json] { rdzv_->request_restart(json); },
                [](const std::string& what) {
                  spdlog::error("ccrun: cannot tell the other nodes: {}", what);
                });
  }

  void on_worker_exit(const WorkerExit& e) {
    if (!e.failed()) {
      if (++exited_ok_ == spec_.nproc_per_node && !stopping_) {
        state_ = State::kBarrier;
        lost_in_barrier_ = true;
        tasks_->run([this] { rdzv_->mark_done(); },
                    [](const std::string& what) {
                      // The watcher tells it again while the store lives.
                      spdlog::warn("ccrun: exit barrier: {}; trying again", what);
                    });
      }
      return;
    }
    if (stopping_) return;  // stopped by us: not a root cause
    Failure f = node_failure(read_error_file(
        (run_logs_->rank_dir(restart_count_, e.rank) / "error.json").string()));
    f.rank = e.rank;
    f.local_rank = e.local_rank;
    f.pid = e.pid;
    f.exit_code = e.exit_code;
    f.signal = e.signal;
    f.time_ms = std::chrono::duration_cast<milliseconds>(e.time.time_since_epoch()).count();
    f.stderr_tail = e.stderr_tail;
    if (auto it = timer_kills_.find(e.pid); it != timer_kills_.end()) {
      f.cause = "timer";
      f.message = it->second + (f.message.empty() ? "" : "\n" + f.message);
    } else if (e.signal == SIGKILL) {
      name_oom_kill(f);
    }
    local_failures_.push_back(f);
    run_logs_->event("failure", restart_count_, f.to_json());
    spdlog::error("ccrun: worker rank {} (pid {}) failed: {}{}", e.rank, e.pid,
                  e.signal ? signal_name(e.signal) : "exit code " + std::to_string(e.exit_code),
                  f.cause == "oom" ? " (the kernel's OOM killer)" : "");
    stopping_ = true;
    state_ = State::kStopping;
    tell_restart(f);
    group_->stop(spec_.stop_grace, [this] { finish(Outcome::kFailedHere); });
  }

  // A SIGKILL nobody in ccrun sent: was it the kernel's OOM killer?
  void name_oom_kill(Failure& f) const {
    std::string why = monitor_->oom_evidence(f.local_rank, f.pid);
    if (why.empty()) return;
    f.cause = "oom";
    f.message = why + (f.message.empty() ? "" : "\n" + f.message);
  }

  void on_round_event(const RoundEvent& ev) {
    if (outcome_) return;
    if (!event_) event_ = ev;
    if (ev.kind == RoundEvent::Kind::kAllDone) {
      finish(Outcome::kSucceeded);
      return;
    }
    if (stopping_) return;
    if (ev.kind == RoundEvent::Kind::kRestartRequested && monitor_ &&
        Failure::from_json(ev.detail).cause == "hang") {
      // Node 0 judged the job hung: this node's ranks' stacks first.
      hang_ = nlohmann::json{{"headline", Failure::from_json(ev.detail).message}};
      stop_with_stacks(monitor_->sample(), [] {}, Outcome::kRoundEnded);
      return;
    }
    stopping_ = true;
    state_ = State::kStopping;
    group_->stop(spec_.stop_grace, [this] { finish(Outcome::kRoundEnded); });
  }

  void finish(Outcome o) {
    if (!outcome_) outcome_ = o;
  }

  // The failures of the attempt that just ended, kept for the report.
  void collect_failures() {
    std::vector<std::string> records;
    try {
      run_off_loop([&] { records = rdzv_->failures(); });
    } catch (const InterruptedError&) {
      throw;
    } catch (const Error& e) {
      spdlog::warn("ccrun: cannot read the other nodes' failures: {}", e.what());
    }
    if (records.empty()) {
      collect_failures_local();
      return;
    }
    last_failures_.clear();
    for (const auto& j : records) last_failures_.push_back(Failure::from_json(j));
    all_failures_.insert(all_failures_.end(), last_failures_.begin(), last_failures_.end());
  }

  void collect_failures_local() {
    last_failures_ = local_failures_;
    all_failures_.insert(all_failures_.end(), local_failures_.begin(), local_failures_.end());
    local_failures_.clear();
  }

  void report(const std::string& reason) {
    std::vector<Failure> final = last_failures_;
    if (final.empty() && dead_node_) {
      Failure f;
      f.node_rank = dead_node_->node_rank;
      f.message = dead_node_->detail;
      f.time_ms = now_ms();
      f.attempt = restart_count_;
      final.push_back(f);
      all_failures_.push_back(f);
    }
    std::string text = format_report(run_id_, final) + "  reason    : " + reason + "\n";
    if (spec_.exit_on_stdin_eof) {
      // Started by a fan-out: every node prints the same report, and the
      // launching ccrun shows one of them (fanout.h, kReportMarker).
      std::string marked;
      std::istringstream lines(text);
      for (std::string l; std::getline(lines, l);) marked += kReportMarker + l + "\n";
      text = marked;
    }
    std::fputs(text.c_str(), stderr);
    if (run_logs_ && run_logs_->kept()) {
      auto j = nlohmann::json::parse(report_json(run_id_, final, all_failures_, reason));
      if (!hang_.is_null()) j["hang"] = hang_;
      run_logs_->write_file("failure_report.json", j.dump(2) + "\n");
    }
  }

  void cleanup() {
    group_.reset();
    file_timer_.reset();
    tasks_.reset();
    rdzv_.reset();
    if (store_.server) store_.server->stop();
    run_logs_.reset();
  }

  const JobSpec& spec_;
  asio::io_context io_{1};
  std::unique_ptr<SignalStream> signals_;
  std::unique_ptr<asio::posix::stream_descriptor> stdin_;
  std::array<char, 256> stdin_buf_;
  int signalled_ = 0;
  bool signalled_again_ = false;
  std::string agent_token_;
  std::shared_ptr<store::StoreInterrupt> interrupt_;
  State state_ = State::kForming;

  JobStore store_;  // hosted here or joined
  std::unique_ptr<rendezvous::RendezvousHandler> rdzv_;
  std::string run_id_ = "none", local_addr_, gloo_ifname_;
  std::unique_ptr<RunLogs> run_logs_;  // the run's log directory (--log-dir)

  RendezvousInfo info_;
  int restart_count_ = 0;
  int generation_ = 0;  // attempts started; stale round events are dropped
  std::unique_ptr<LogMux> output_;  // the workers' output, to console and files
  std::unique_ptr<WorkerGroup> group_;
  std::unique_ptr<StoreTasks> tasks_;
  std::unique_ptr<HangMonitor> monitor_;     // this attempt's progress watch
  nlohmann::json hang_;                      // the last hang verdict and its stacks
  std::unique_ptr<FileTimerServer> file_timer_;  // TORCHELASTIC_ENABLE_FILE_TIMER=1
  std::map<pid_t, std::string> timer_kills_;     // pids the FileTimer killed, and why
  std::optional<Outcome> outcome_;
  std::optional<RoundEvent> event_, dead_node_;
  std::vector<Failure> local_failures_, last_failures_, all_failures_;
  bool stopping_ = false;
  bool lost_in_barrier_ = false;
  int attempts_ = 0;  // rendezvous rounds that started workers (or would have)
  std::string end_reason_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  int exited_ok_ = 0;
};

}  // namespace

int run(const JobSpec& spec) {
  if (spec.entrypoint.empty()) {
    std::fprintf(stderr, "ccrun: no program to run; give one after the flags\n");
    return 2;
  }
  Agent agent(spec);
  return agent.run();
}

}  // namespace ccrun::agent
