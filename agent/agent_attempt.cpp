// One attempt of the agent (agent_impl.h): the workers' specs and start,
// their exits (a failure record, an OOM kill named), the round's events
// from the other nodes, and the attempt's outcome.
#include "agent_impl.h"

#include <signal.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "ccrun/console_frame.h"
#include "ccrun/error.h"
#include "ccrun/host_name.h"
#include "ccrun/signal_names.h"
#include "descendants.h"
#include "worker_env.h"

namespace ccrun::agent {

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

// -r/--redirects or -t/--tee for local rank `lr`: bit 1 stdout, bit 2 stderr.
int stream_bits(int fallback, const std::map<int, int>& per_rank, int lr) {
  auto it = per_rank.find(lr);
  return it == per_rank.end() ? fallback : it->second;
}

// The prefix of a worker's console lines: the template through the
// substitute_macros of the program's arguments ("" for none).
std::string line_prefix(const LogSpec& logs, const std::string& role, int rank, int lr) {
  if (logs.line_prefix_template.empty()) return "";
  return substitute_macros(logs.line_prefix_template, {{"role_name", role},
                                                     {"rank", std::to_string(rank)},
                                                     {"local_rank", std::to_string(lr)}});
}

}  // namespace

Agent::Outcome Agent::run_attempt() {
  attempt_.reset();  // the attempt before, whole (its workers are all reaped)
  // Started by a host list's fan-out, one console shows every node's lines:
  // read at each wake-up, a node's lines reach it before another node's
  // failure report (LogMux::Reading).
  auto reading = spec_.started_by_fanout ? LogMux::Reading::kEveryWake
                                         : LogMux::Reading::kTickWhenBusy;
  attempt_ = std::make_unique<Attempt>(io_, ++generation_, std::make_unique<LogMux>(io_, reading));
  Attempt& a = *attempt_;
  a.stopping = signalled_ != 0;
  state_ = State::kRunning;
  a.workers = parts_.workers(io_, *a.output, agent_token_);
  a.pmi = make_pmi_server();
  a.monitor = make_monitor();
  open_filtered_logs();
  open_collapsers();
  WorkerStarter* starter = signalled_ ? nullptr : warm_starter();
  if (signalled_) {
    a.finish(Outcome::kSignalled);
  } else {
    start_workers(starter);
    renew_template();
  }
  int gen = a.generation;
  rdzv_->set_attempt(restart_count_);
  rdzv_->watch([this, gen](const RoundEvent& ev) {
    asio::post(io_, [this, gen, ev] {
      if (gen == generation_) on_round_event(ev);
    });
  });
  io_.restart();
  while (!a.outcome) io_.run_one();
  a.monitor->stop();
  // The watcher and the store tasks may be blocked on the store: wait for
  // them while signals are still served (a signal interrupts them).
  run_off_loop([this] {
    rdzv_->shutdown();
    attempt_->tasks.join();
  });
  if (signalled_) a.outcome = Outcome::kSignalled;
  if (a.startup) {
    // A program without steps: its start-up line ends at the phases reached.
    a.startup->finish([this](const std::vector<StartupTimeline>& ranks) {
      std::vector<RankView> views = local_views();
      if (views.size() != ranks.size()) return false;
      for (size_t i = 0; i < views.size(); ++i) {
        if (!past_startup(ranks[i], views[i].steps)) return false;
      }
      return true;
    });
  }
  a.startup.reset();
  a.pmi.reset();  // its store thread ends before the next round's
  a.workers.reset();
  for (auto& c : a.collapse) {
    if (c) c->flush_all();  // every line of the attempt before what follows
  }
  attempt_ended_ms_ = wall_clock_ms();
  return *a.outcome;
}

WorkerSpec Agent::worker_spec(int lr) {
  WorkerSpec w;
  w.local_rank = lr;
  w.rank = info_.rank_offset + lr;
  std::string error_file = run_logs_->error_file(restart_count_, lr).string();
  std::error_code ec;
  fs::remove(error_file, ec);
  EnvContext ctx{&spec_, &info_, run_id_, restart_count_, store_.etcd ? "" : store_.endpoint.host,
                 store_.endpoint.port, gloo_ifname_};
  w.argv = worker_arguments(spec_.entrypoint, lr);
  w.stdin_fd = workers_read_stdin() ? STDIN_FILENO : -1;
  EnvBuilder env = worker_environment(ctx, lr, error_file);
  w.token = agent_token_ + "." + std::to_string(restart_count_) + "." + std::to_string(lr);
  env.set(kAgentTokenVar, w.token);
  if (size_t(lr) < placements_.size()) w.placement = placements_[size_t(lr)];
  attempt_->monitor->add_worker_env(env, lr);
  if (file_timer_) env.set("TORCHELASTIC_TIMER_FILE", file_timer_->path());
  if (attempt_->pmi) {
    w.pmi_fd = attempt_->pmi->channel(lr);
    add_mpi_environment(env, lr);
  }
  w.env = env.flatten();
  int redirect = stream_bits(spec_.logs.default_redirects, spec_.logs.redirects, lr);
  int tee = stream_bits(spec_.logs.default_tee, spec_.logs.tee, lr);
  bool shown = spec_.logs.local_ranks_filter.empty() || spec_.logs.local_ranks_filter.count(lr);
  bool files = run_logs_->kept();
  fs::path dir = files ? run_logs_->rank_dir(restart_count_, lr) : fs::path();
  for (int fd : {1, 2}) {
    StreamOptions& o = fd == 1 ? w.out : w.err;
    o.prefix = line_prefix(spec_.logs, spec_.role, w.rank, lr);
    // bit 1: stdout, bit 2: stderr; tee puts a redirected stream back on the
    // console (torchrun: the file, and the console through its tail)
    o.to_console = shown && (!(redirect & fd) || (tee & fd));
    o.console_fd = fd;
    o.file = files ? (dir / (fd == 1 ? "stdout.log" : "stderr.log")).string() : "";
    // torch copies the tee'd streams of the ranks shown (its tee_stdouts)
    if (shown && (tee & fd)) o.duplicate = attempt_->filtered[fd - 1];
    o.collapse = attempt_->collapse[fd - 1];
    o.rank = w.rank;
    o.local_rank = lr;
  }
  return w;
}

void Agent::open_collapsers() {
  if (!spec_.logs.collapse_output) return;
  size_t shown = shown_local_ranks(size_t(spec_.nproc_per_node), spec_.logs.local_ranks_filter);
  for (int fd : {1, 2}) {
    // Started by a host list's fan-out: the launching ccrun collapses every
    // node's lines together (ccrun/console_frame.h).
    attempt_->collapse[fd - 1] =
        spec_.started_by_fanout
            ? make_framing_sink(io_, fd)
            : std::make_shared<ConsoleCollapser>(
                  io_, CollapseOptions{fd, shown, spec_.logs.line_prefix_template, spec_.role});
  }
}

void Agent::open_filtered_logs() {
  const std::vector<std::string>* filters[] = {&spec_.logs.duplicate_stdout_filters,
                                               &spec_.logs.duplicate_stderr_filters};
  for (int i = 0; i < 2; ++i) {
    if (filters[i]->empty()) continue;
    fs::path dir = run_logs_->root() / ("attempt_" + std::to_string(restart_count_));
    std::error_code ec;
    fs::create_directories(dir, ec);
    attempt_->filtered[i] = std::make_shared<FilteredLog>(
        (dir / (i == 0 ? "filtered_stdout.log" : "filtered_stderr.log")).string(), *filters[i]);
  }
}

void Agent::start_workers(WorkerStarter* starter) {
  Attempt& a = *attempt_;
  try {
    // Each spec is built just before its worker starts and freed once it
    // runs (WorkerGroup::start): the environments are ~7 KiB a worker.
    a.workers->start(spec_.nproc_per_node, [this](int lr) { return worker_spec(lr); },
                     [this](const WorkerExit& e) { on_worker_exit(e); }, starter);
    if (a.pmi) a.pmi->close_worker_ends();  // the workers hold them
    if (lends_terminal(owns_terminal(), workers_read_stdin(), spec_.nproc_per_node)) {
      a.terminal = std::make_unique<TerminalLease>(a.workers->pids().front());
    }
    a.monitor->start(a.workers->pids(), a.workers->spawn_times());
    a.startup = std::make_unique<StartupWatch>(
        io_, [monitor = a.monitor.get()] { return monitor->timelines(); },
        [this](const std::vector<StartupTimeline>& ranks) { on_started(ranks); });
    run_logs_->event("start", restart_count_,
                     nlohmann::json{{"first_rank", info_.rank_offset},
                                    {"workers", spec_.nproc_per_node}}
                         .dump());
  } catch (const Error& e) {
    std::fprintf(stderr, "ccrun: %s\n", e.what());
    Failure f = node_failure(e.what(), local_views());
    a.local_failures.push_back(f);
    tell_restart(f);
    a.stopping = true;
    a.workers->stop(spec_.stop_grace, [this] { finish(Outcome::kFailedHere); });
  }
}

Failure Agent::node_failure(const std::string& message, const std::vector<RankView>& local) const {
  Failure f;
  f.node_rank = info_.node_rank;
  f.hostname = host_name();
  f.addr = local_addr_;
  f.time_ms = wall_clock_ms();
  f.attempt = restart_count_;
  f.message = message;
  for (const auto& r : local) {
    // A rank that reports progress, or whose program started (the hook's
    // first mark), has a step count, 0 included.
    if (r.reporting || r.startup.reached(progress::Phase::kInterpreter)) {
      f.steps = std::max(f.steps, int64_t(r.steps));
    }
  }
  return f;
}

std::vector<RankView> Agent::local_views() const {
  if (!attempt_ || !attempt_->monitor) return {};
  return attempt_->monitor->sample();
}

void Agent::tell_restart(const Failure& f) {
  bool elastic = spec_.rdzv.backend != rendezvous::Backend::kStatic;
  bool may_leave = leaves_on_failure(failure_streak_, elastic, info_.num_nodes, spec_.min_nodes,
                                     spec_.max_nodes);  // the most spares there can be
  int streak = failure_streak_, nodes = info_.num_nodes, min = spec_.min_nodes;
  attempt_->tasks.run([this, f, may_leave, streak, nodes, min] {
                // This failure may make the node's streak: then it leaves
                // (round_decision.h), and the next round admits a spare.
                bool leaves = may_leave && leaves_on_failure(streak, true, nodes, min,
                                                             rdzv_->spares_waiting());
                // It leaves only if its request ended the round: an earlier
                // end expects it back.
                leaving_ = rdzv_->request_restart(f, leaves) && leaves;
              },
              [](const std::string& what) {
                spdlog::error("ccrun: cannot tell the other nodes: {}", what);
              });
}

bool Agent::workers_read_stdin() const { return !spec_.exit_on_stdin_eof; }

void Agent::on_worker_exit(const WorkerExit& e) {
  Attempt& a = *attempt_;
  bool had_terminal = a.terminal && a.terminal->lent();
  a.terminal.reset();  // the terminal is ccrun's again
  if (had_terminal && e.signal == SIGINT && !a.stopping) {
    // The terminal's Ctrl-C reached the worker that held it, not ccrun:
    // the user's stop, as if ccrun had got it.
    on_signal(SIGINT);
    return;
  }
  if (!e.failed()) {
    if (++a.exited_ok == spec_.nproc_per_node && !a.stopping) {
      state_ = State::kBarrier;
      a.reached_barrier = true;
      a.tasks.run([this] { rdzv_->mark_done(); },
                  [](const std::string& what) {
                    // The watcher tells it again while the store lives.
                    spdlog::warn("ccrun: exit barrier: {}; trying again", what);
                  });
    }
    return;
  }
  if (a.stopping) return;  // stopped by us: not a root cause
  std::vector<RankView> local = local_views();  // once: the failure's steps, and a desync
  Failure f = node_failure(
      read_error_file(run_logs_->error_file(restart_count_, e.local_rank).string()), local);
  f.rank = e.rank;
  f.local_rank = e.local_rank;
  f.pid = e.pid;
  f.exit_code = e.exit_code;
  f.signal = e.signal;
  f.time_ms = std::chrono::duration_cast<milliseconds>(e.time.time_since_epoch()).count();
  f.stderr_tail = e.stderr_tail;
  if (a.mpi_aborts.count(e.local_rank)) {
    name_mpi_abort(f);  // the SIGKILL was the agent's
  } else if (auto it = timer_kills_.find(e.pid); it != timer_kills_.end()) {
    f.cause = FailureCause::kTimer;
    f.message = it->second + (f.message.empty() ? "" : "\n" + f.message);
  } else if (e.signal == SIGKILL) {
    name_oom_kill(f);
  }
  if (f.cause == FailureCause::kNone) name_desync(f, local);
  a.local_failures.push_back(f);
  run_logs_->event("failure", restart_count_, f.to_json().dump());
  spdlog::error("ccrun: worker rank {} (pid {}) failed: {}{}", e.rank, e.pid,
                f.signal ? signal_name(f.signal) : "exit code " + std::to_string(f.exit_code),
                f.cause == FailureCause::kOom ? " (the kernel's OOM killer)" : "");
  a.stopping = true;
  state_ = State::kStopping;
  tell_restart(f);
  a.workers->stop(spec_.stop_grace, [this] { finish(Outcome::kFailedHere); });
}

void Agent::name_oom_kill(Failure& f) const {
  std::string why = attempt_->monitor->oom_evidence(f.local_rank, f.pid);
  if (why.empty()) return;
  f.cause = FailureCause::kOom;
  f.message = why + (f.message.empty() ? "" : "\n" + f.message);
}

void Agent::name_desync(Failure& f, const std::vector<RankView>& local) const {
  std::string desync = desync_at_failure(local, f.rank);
  if (desync.empty()) return;
  spdlog::error("ccrun: rank {} failed inside a call its group did not agree on: {}", f.rank, desync);
  f.message = "desync: " + desync + "\n" +
              (f.message.empty() ? "its last stderr lines:\n" + f.stderr_tail : f.message);
}

void Agent::on_round_event(const RoundEvent& ev) {
  Attempt& a = *attempt_;
  if (a.outcome) return;
  if (!a.event) a.event = ev;
  if (ev.kind == RoundEvent::Kind::kAllDone) {
    a.finish(Outcome::kSucceeded);
    return;
  }
  if (a.stopping) return;
  if (ev.failure && ev.failure->cause == FailureCause::kHang) {
    // Node 0 judged the job hung: this node's ranks' stacks first.
    a.hang = nlohmann::json{{"headline", ev.failure->message}};
    stop_with_stacks(a.monitor->sample(), [](const HangEvidence&) {}, Outcome::kRoundEnded);
    return;
  }
  a.stopping = true;
  state_ = State::kStopping;
  a.workers->stop(spec_.stop_grace, [this] { finish(Outcome::kRoundEnded); });
}

StartupReference Agent::startup_reference() const {
  if (attempts_ <= 1 && restart_count_ == 0) {
    auto since = std::chrono::steady_clock::now() - started_;
    return {wall_clock_ms() - std::chrono::duration_cast<milliseconds>(since).count(), "launch"};
  }
  const Failure* first = nullptr;
  for (const auto& f : last_failures_) {
    if (f.rank >= 0 && (!first || f.time_ms < first->time_ms)) first = &f;
  }
  if (first) return {first->time_ms, "rank " + std::to_string(first->rank) + " failed"};
  return {attempt_ended_ms_, "the attempt before ended"};
}

void Agent::on_started(const std::vector<StartupTimeline>& ranks) {
  std::string line = startup_line(restart_count_, startup_reference(), ranks);
  spdlog::info("ccrun: {}", line);
  startup_lines_.push_back(line);
  for (const auto& t : ranks) run_logs_->event("startup", restart_count_, t.to_json().dump());
  preload_imports();
}

}  // namespace ccrun::agent
