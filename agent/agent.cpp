// The agent's sequence (agent_impl.h has the class, its overview and each
// member's contract): the job from start to end (run, loop), the stop
// signals and stdin's EOF, the store hosted or joined, and calls run off the
// io_context's thread.
#include "agent_impl.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <random>
#include <thread>
#include <utility>

#include "ccrun/endpoint.h"
#include "ccrun/error.h"
#include "ccrun/finished_run.h"
#include "ccrun/host_name.h"
#include "ccrun/job_keys.h"
#include "ccrun/signal_names.h"
#include "orphan_killer.h"
#include "worker_env.h"

namespace ccrun::agent {
namespace {

namespace asio = boost::asio;

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

}  // namespace

Agent::Agent(const JobSpec& spec, AgentParts parts)
    : spec_(spec), node_env_(NodeEnvironment::read()), parts_(std::move(parts)),
      agent_token_(random_hex(4)) {}

int Agent::run() {
  OrphanKiller::start(agent_token_);  // forked before any thread of ours exists
  setup_signals();
  interrupt_ = std::make_shared<store::StoreInterrupt>();
  if (spec_.exit_on_stdin_eof) watch_stdin();
  if (spec_.nproc_per_node > 1 && !node_env_.omp_num_threads_set) {
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
    agent_error_ = true;
    end_reason_ = e.what();
    end_error_type_ = error_type_name(e);
    // The id's run ended before this node came: not a failure of a run.
    bool already_ran = dynamic_cast<const JobAlreadyRanError*>(&e) != nullptr;
    status = signalled_ ? exit_signalled() : already_ran ? kExitAlreadyRan : 1;
  }
  summarize(status);
  write_own_error_file(status);
  record_end_event(status);
  cleanup();
  return status;
}

void Agent::summarize(int status) {
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const char* how = "failed";
  if (status == 0) how = attempts_ > 0 ? "succeeded" : "succeeded without this node (it ran nothing)";
  if (status == kExitAlreadyRan) how = "was not run (its id already ran)";
  if (status > 128) how = "was stopped";
  spdlog::info("ccrun: job '{}' {} (exit {}) after {:.1f}s: {} attempt(s), {} node(s), {} rank(s)",
               run_id_, how, status, wall, attempts_, info_.num_nodes, info_.world_size);
  for (const auto& line : startup_lines_) spdlog::info("ccrun:   {}", line);
  for (const auto& dir : incidents_) spdlog::info("ccrun:   incident: {}", dir);
  if (run_logs_) {
    run_logs_->event("stop", restart_count_,
                     nlohmann::json{{"exit_code", status}, {"wall_s", wall},
                                    {"reason", status == 0 ? "all workers exited 0" : end_reason_},
                                    {"attempts", attempts_}}
                         .dump());
  }
}

void Agent::setup_signals() {
  std::vector<int> handled = {SIGINT, SIGTERM};
  handled.insert(handled.end(), spec_.signals_to_handle.begin(), spec_.signals_to_handle.end());
  ::signal(SIGPIPE, SIG_IGN);
  signals_ = std::make_unique<SignalStream>(io_, handled);
  arm_signals();
}

void Agent::watch_stdin() {
  int fd = ::dup(0);
  if (fd < 0) return;
  stdin_ = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
  read_stdin();
}

void Agent::read_stdin() {
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

void Agent::arm_signals() {
  signals_->async_wait([this](int signo) {
    on_signal(signo);
    arm_signals();
  });
}

void Agent::on_signal(int signo) {
  Workers* workers = attempt_ ? attempt_->workers.get() : nullptr;  // null between attempts
  if (signalled_ != 0) {
    spdlog::warn("ccrun: received {} again; killing the workers now", signal_name(signo));
    signalled_again_ = true;
    interrupt_->trigger();
    if (workers) workers->kill_now();
    return;
  }
  signalled_ = signo;
  bool running = workers && workers->running() > 0;
  spdlog::warn("ccrun: received {} while {}; stopping{}", signal_name(signo), state_name(),
               running ? " the workers (SIGKILL after " +
                             std::to_string(spec_.stop_grace.count() / 1000) + "s)"
                       : "");
  interrupt_->trigger();
  if (attempt_) attempt_->stopping = true;
  if (warm_) warm_->abort();  // an attempt waiting for its imports stops waiting
  if (running) {
    // The workers get the signal itself, once (a script that saves a
    // checkpoint on KeyboardInterrupt must not be cut short by a SIGTERM
    // right behind it), and SIGKILL after stop_grace, as torchrun does. A
    // stop already under way (a failure) keeps its grace period.
    if (workers->stopping()) workers->signal_all(signo);
    workers->stop(spec_.stop_grace, [this] { finish(Outcome::kSignalled); }, signo);
  } else if (attempt_) {
    finish(Outcome::kSignalled);
  }
}

const char* Agent::state_name() const {
  switch (state_) {
    case State::kForming: return "waiting for the other nodes";
    case State::kRunning: return "running the workers";
    case State::kStopping: return "stopping the workers";
    case State::kBarrier: return "waiting at the exit barrier";
    case State::kLeaving: return "leaving the job";
    case State::kExcluded: return "sitting out its exclusion";
  }
  return "running";
}

void Agent::run_off_loop(const std::function<void()>& fn) {
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

void Agent::run_bounded(const std::function<void()>& fn, milliseconds timeout) {
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

rendezvous::RendezvousOptions Agent::rendezvous_options(uint16_t master_port) const {
  const auto& r = spec_.rdzv;
  rendezvous::RendezvousOptions ro;
  ro.run_id = run_id_;
  static_cast<RendezvousTiming&>(ro) = r;
  ro.backend = r.backend;
  ro.min_nodes = spec_.min_nodes;
  ro.max_nodes = spec_.max_nodes;
  ro.node_rank = spec_.node_rank;
  ro.local_world_size = spec_.nproc_per_node;
  ro.role = spec_.role;
  ro.local_addr = local_addr_;
  ro.forget_hint = forget_hint(store_plan_, run_id_);
  ro.master_addr = spec_.master_addr;
  ro.master_port = master_port;
  if (worker_store_) ro.worker_store_port = [ws = worker_store_.get()] { return int(ws->port()); };
  if (store_.server && !worker_store_) {  // the workers meet in the store this agent hosts
    ro.clear_worker_keys = [server = store_.server.get(), keep = JobKeys(run_id_).base()] {
      size_t n = server->erase_keys_outside(keep);
      spdlog::debug("ccrun: cleared {} key(s) the workers of the attempt before left in the store", n);
    };
  }
  return ro;
}

void Agent::setup_store() {
  // The job's name first: a store that cannot be reached ends the job, and
  // the summary names it.
  run_id_ = store_plan_.random_id ? random_hex(2) : spec_.rdzv.id;
  if (parts_.rendezvous) {  // given: no store of the agent's own (AgentParts)
    rdzv_ = parts_.rendezvous();
    return;
  }
  store_ = open_job_store(spec_, store_plan_, interrupt_);
  local_addr_ = store_.local_addr;
  gloo_ifname_ = interface_of(local_addr_);
  if (store_plan_.worker_store) {
    worker_store_ = std::make_unique<WorkerStore>(store_plan_.worker_bind_host(local_addr_));
  }
  rdzv_ = rendezvous::create_rendezvous_handler(rendezvous_options(store_.master_port),
                                                store_.connector());
}

std::string Agent::store_endpoint() const {
  return store_.endpoint.to_string();
}

int Agent::loop() {
  plan_placements();  // before the store: a rank that cannot be bound fails at once
  start_template();   // its imports overlap the store and the rendezvous
  start_job();
  RestartBudget budget{spec_.max_restarts, spec_.max_restarts,
                       spec_.rdzv.backend == rendezvous::Backend::kStatic, 1, spec_.min_nodes,
                       spec_.stop_without_progress};
  for (;;) {
    if (int status = clear_to_join(); status >= 0) return status;
    try {
      join_round();
    } catch (const JobFinishedError& e) {  // a spare never needed: not a failure
      spdlog::info("ccrun: {}", e.what());
      return 0;
    }
    AttemptEnd end = end_of(run_attempt());
    if (end.how == AttemptEnd::How::kRoundEnded) say_why_the_group_stops(end);
    budget.num_nodes = info_.num_nodes;
    note_progress(budget, end);
    Decision d = decide(end, budget);
    if (excluded_by_failures(end) && d.action == Decision::Action::kRestart) {
      collect_failures();
      exclude_self("its workers failed first in the last " +
                   std::to_string(kExcludeAfterFailures) + " attempts in a row");
      continue;  // clear_to_join() sits it out
    }
    switch (d.action) {
      case Decision::Action::kStop:
        return exit_signalled();
      case Decision::Action::kStopped:
        end_reason_ = d.reason;
        spdlog::warn("ccrun: the job was stopped on another node: {}", d.reason);
        // Says so to a hosting node that waits for it, if its store still answers.
        run_bounded([this] { rdzv_->leave(false, milliseconds(0)); }, milliseconds(1'000));
        return 128 + end.stop_signal;
      case Decision::Action::kLeave:
        state_ = State::kLeaving;
        run_off_loop([this] { rdzv_->leave(store_.server != nullptr, milliseconds(60'000)); });
        return 0;
      case Decision::Action::kStoreLost:
        return store_lost(d.reason);
      case Decision::Action::kFail:
        collect_failures();
        return fail_job(d.reason);
      case Decision::Action::kNoProgress:
        collect_failures();
        return fail_job(d.reason, kExitNoProgress);
      case Decision::Action::kRestart:
      case Decision::Action::kRejoin:
        collect_failures();
        note_restart(d.action == Decision::Action::kRestart, end, budget);
        break;
    }
  }
}

void Agent::start_job() {
  state_ = State::kForming;
  store_plan_ = plan_store(spec_, node_env_.no_shared_worker_store);
  asio::steady_timer slow(io_, std::chrono::seconds(5));
  slow.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    spdlog::warn("ccrun: no answer yet from the store at {}; retrying for up to {}s "
                 "(--rdzv-conf join_timeout){}",
                 store_address_hint(spec_, store_plan_), spec_.rdzv.join_timeout.count() / 1000,
                 store_wait_hint(store_plan_));
  });
  run_off_loop([this] { setup_store(); });
  slow.cancel();
  std::string home = logs_home(spec_.logs);
  if (spec_.logs.log_dir.empty() && !home.empty()) {
    spdlog::info("ccrun: -r/--redirects without --log-dir: the redirected output is kept under "
                 "{} (--log-dir DIR chooses where)", home);
  }
  run_logs_ = std::make_unique<RunLogs>(home, run_id_, agent_token_);
  serve_file_timer();
  if (run_logs_->kept()) {
    spdlog::info("ccrun: logs in {}", run_logs_->root().string());
    steps_ = std::make_unique<StepSeries>(run_logs_->root() / "steps.jsonl");
  }
  if (store_plan_.announce) {  // its id and port are random: say them, ready to paste
    spdlog::info("ccrun: job '{}'; to see it: ccrun status --rdzv-endpoint {} --rdzv-id {}", run_id_,
                 store_endpoint(), run_id_);
  }
  bool filters = !spec_.logs.duplicate_stdout_filters.empty() || !spec_.logs.duplicate_stderr_filters.empty();
  if (filters && !run_logs_->kept()) {
    spdlog::warn("ccrun: the filtered_stdout.log/filtered_stderr.log of --duplicate-*-filters are "
                 "written to {}, which is removed when the run ends; give --log-dir DIR to keep them",
                 run_logs_->root().string());
  }
}

void Agent::join_round() {
  state_ = State::kForming;
  if (worker_store_ && attempts_ > 0) worker_store_->renew();  // worker_store.h: why
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

AttemptEnd Agent::end_of(Outcome outcome) const {
  if (outcome == Outcome::kSignalled || signalled_) return AttemptEnd::signalled();
  if (outcome == Outcome::kSucceeded) return AttemptEnd::succeeded();
  if (const auto& ev = attempt_->event) {
    return AttemptEnd::round_ended(ev->kind, ev->detail, ev->failure, ev->stop_signal);
  }
  std::optional<Failure> here;  // a failure here
  if (!attempt_->local_failures.empty()) here = attempt_->local_failures.front();
  return AttemptEnd::round_ended(RoundEndKind::kRestartRequested, "", here);
}

void Agent::say_why_the_group_stops(const AttemptEnd& end) {
  if (end.kind == RoundEndKind::kNodeDead) {
    spdlog::warn("ccrun: the group stops: {}", end.detail);
  }
  if (end.kind != RoundEndKind::kRestartRequested || !end.failure) return;
  const Failure& f = *end.failure;
  if (f.rank < 0) {  // the node itself (a worker that could not start): no rank to name
    spdlog::warn("ccrun: the group stops: node {} failed: {}", f.node_rank,
                 f.message.substr(0, f.message.find('\n')));
    return;
  }
  std::string how = f.cause == FailureCause::kHang ? "hung"
                    : f.signal                     ? signal_name(f.signal)
                                                   : "exit code " + std::to_string(f.exit_code);
  if (f.cause == FailureCause::kOom) how += ", the kernel's OOM killer";
  spdlog::warn("ccrun: the group stops: node {} rank {} failed ({}, pid {})", f.node_rank,
               f.rank, how, f.pid);
}

int Agent::fail_job(const std::string& reason, int exit_status) {
  end_reason_ = reason;
  report(reason);
  state_ = State::kLeaving;
  run_off_loop([&] {
    rdzv_->set_closed({reason, 0});
    rdzv_->leave(store_.server != nullptr, milliseconds(10'000));
  });
  return exit_status;
}

void Agent::note_restart(bool counts, const AttemptEnd& end, RestartBudget& budget) {
  if (counts) {
    --budget.restarts_left;
    ++restart_count_;
    spdlog::warn("ccrun: restarting the workers ({} restart(s) left)", budget.restarts_left);
  } else {
    spdlog::info("ccrun: membership changed; restarting the workers in a new round");
  }
  // Why, as an object: the round's end and, for a failure, its record
  // (not the record's JSON inside a string).
  nlohmann::json why{{"kind", std::string(to_string(end.kind))}};
  if (end.failure) {
    why["failure"] = end.failure->to_json();
  } else if (!end.detail.empty()) {
    why["detail"] = end.detail.substr(0, 2000);
  }
  run_logs_->event("restart", restart_count_,
                   nlohmann::json{{"restarts_left", budget.restarts_left}, {"counts", counts},
                                  {"why", why}}
                       .dump());
}

void Agent::cleanup() {
  attempt_.reset();  // its workers first
  warm_.reset();
  file_timer_.reset();
  steps_.reset();
  rdzv_.reset();
  worker_store_.reset();
  if (store_.server) store_.server->stop();
  run_logs_.reset();
}

int run(const JobSpec& spec) {
  if (spec.entrypoint.empty()) {
    const char* what = "no program to run; give one after the flags";
    std::fprintf(stderr, "ccrun: %s\n", what);
    write_launcher_error("ccrun::ConfigError", what);
    return 2;
  }
  AgentParts parts;
  parts.workers = [](asio::io_context& io, LogMux& output, const std::string& token) {
    return std::make_unique<WorkerGroup>(io, output, token);
  };
  Agent agent(spec, std::move(parts));
  return agent.run();
}

}  // namespace ccrun::agent
