// The per-node agent: hosts or joins the store, rendezvouses, runs the
// workers, and restarts or reports (see include/ccrun/agent.h).
//
// One io_context carries every event of a node: worker exits (pidfds),
// worker output (pipes), stop signals (signal_set) and the rendezvous
// round's end (posted by the rendezvous watcher thread).
//
// Worker states of one attempt, in order:
//   kRunning   spawned; output flows through LogMux
//   kStopping  a failure here or an end of round elsewhere: SIGTERM sent,
//              SIGKILL after stop_grace
//   kStopped   every worker reaped; the attempt's outcome is known
#include "ccrun/agent.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <utility>
#include <boost/asio.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "ccrun/endpoint.h"
#include "ccrun/error.h"
#include "ccrun/rendezvous.h"
#include "ccrun/store_server.h"
#include "ccrun/tcp_store.h"
#include "failure_report.h"
#include "janitor.h"
#include "log_mux.h"
#include "worker_env.h"
#include "worker_group.h"

namespace ccrun::agent {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using rendezvous::RendezvousInfo;
using rendezvous::RoundEvent;
using std::chrono::milliseconds;

constexpr uint16_t kDefaultRdzvPort = 29400;

int64_t now_ms() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

int signal_number(const std::string& name) {
  for (int s = 1; s < NSIG; ++s) {
    const char* abbrev = sigabbrev_np(s);
    if (abbrev && name == std::string("SIG") + abbrev) return s;
  }
  return 0;
}

class Agent {
 public:
  explicit Agent(const JobSpec& spec) : spec_(spec), signals_(io_) {}

  int run() {
    Janitor::instance();  // forked before any thread of ours exists
    setup_signals();
    try {
      setup_store();
    } catch (const Error& e) {
      std::fprintf(stderr, "ccrun: %s\n", e.what());
      return 1;
    }
    if (spec_.nproc_per_node > 1 && !std::getenv("OMP_NUM_THREADS")) {
      std::fprintf(stderr,
                   "ccrun: setting OMP_NUM_THREADS environment variable for each process to "
                   "be 1 in default, to avoid your system being overloaded, please further "
                   "tune the variable for optimal performance in your application as needed.\n");
    }
    int status = loop();
    cleanup();
    return status;
  }

 private:
  enum class Outcome { kSucceeded, kFailedHere, kRoundEnded, kSignalled };

  void setup_signals() {
    std::vector<std::string> names = spec_.signals_to_handle;
    names.push_back("SIGINT");
    names.push_back("SIGTERM");
    for (const auto& n : names) {
      int s = signal_number(n);
      boost::system::error_code ec;
      if (s) signals_.add(s, ec);
    }
    ::signal(SIGPIPE, SIG_IGN);
    arm_signals();
  }

  void arm_signals() {
    signals_.async_wait([this](boost::system::error_code ec, int signo) {
      if (ec) return;
      on_signal(signo);
      arm_signals();
    });
  }

  void on_signal(int signo) {
    if (signalled_ == 0) {
      spdlog::warn("ccrun: received {}; stopping the workers (SIGKILL after {}s)",
                   signal_name(signo), spec_.stop_grace.count() / 1000);
    }
    signalled_ = signo;
    if (group_ && group_->running() > 0) {
      // Forward the signal itself first; SIGTERM and then SIGKILL follow.
      group_->signal_all(signo);
      group_->stop(spec_.stop_grace, [this] { finish(Outcome::kSignalled); });
    } else {
      finish(Outcome::kSignalled);
    }
  }

  void setup_store() {
    const auto& r = spec_.rdzv;
    std::string host;
    uint16_t port;
    bool hosting = false;
    std::string bind_host = "0.0.0.0";
    if (spec_.standalone) {
      host = "127.0.0.1";
      port = 0;
      hosting = true;
      bind_host = host;
    } else if (r.backend == "static") {
      host = spec_.master_addr;
      port = uint16_t(spec_.master_port);
      hosting = spec_.node_rank == 0;
    } else {
      auto ep = rendezvous::parse_endpoint(r.endpoint, kDefaultRdzvPort);
      host = ep.host;
      port = ep.port;
      hosting = r.is_host.value_or(is_local_host(host));
    }
    if (host.rfind("127.", 0) == 0 || host == "localhost") bind_host = "127.0.0.1";
    const char* token_file = std::getenv("CCRUN_STORE_TOKEN_FILE");
    std::string token;
    if (token_file) {
      std::ifstream in(token_file);
      std::getline(in, token);
      if (token.empty()) {
        throw ConfigError(std::string("CCRUN_STORE_TOKEN_FILE=") + token_file +
                          ": empty or unreadable; put the store's shared secret in it");
      }
    }
    if (hosting) {
      rendezvous::StoreServerOptions so;
      so.host = bind_host;
      so.port = port;
      so.token = token;
      auto server = std::make_unique<rendezvous::StoreServer>(so);
      try {
        server->start();
        port = server->port();
        server_ = std::move(server);
      } catch (const Error& e) {
        // With c10d, another agent of this machine may host it already.
        if (r.backend == "static" || spec_.standalone || r.is_host.value_or(false)) throw;
        spdlog::info("ccrun: not hosting the store ({}); joining it as a client", e.what());
      }
    }
    store_opts_.host = host;
    store_opts_.port = port;
    store_opts_.token = token;
    store_opts_.timeout = std::max(r.read_timeout, milliseconds(1000));
    store_opts_.connect_timeout = r.join_timeout;
    store_ = std::make_shared<rendezvous::TcpStore>(store_opts_);
    store_->set_timeout(r.join_timeout);
    local_addr_ = spec_.local_addr.empty() ? store_->local_address() : spec_.local_addr;
    gloo_ifname_ = interface_of(local_addr_);

    run_id_ = spec_.standalone && r.id == "none" ? random_id() : r.id;
    rendezvous::RendezvousOptions ro;
    ro.run_id = run_id_;
    ro.backend = spec_.standalone ? "c10d" : r.backend;
    ro.min_nodes = spec_.min_nodes;
    ro.max_nodes = spec_.max_nodes;
    ro.node_rank = spec_.node_rank;
    ro.local_world_size = spec_.nproc_per_node;
    ro.local_addr = local_addr_;
    ro.master_addr = spec_.master_addr;
    ro.master_port = port;
    ro.join_timeout = r.join_timeout;
    ro.last_call_timeout = r.last_call_timeout;
    ro.close_timeout = r.close_timeout;
    ro.keep_alive_interval = r.keep_alive_interval;
    ro.keep_alive_max_attempt = r.keep_alive_max_attempt;
    auto opts = store_opts_;
    rdzv_ = rendezvous::create_rendezvous_handler(ro, [opts] {
      auto s = std::make_shared<rendezvous::TcpStore>(opts);
      return s;
    });
  }

  static std::string random_id() {
    std::random_device rd;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
    return buf;
  }

  // Blocks in next_rendezvous on a thread while signals are still served.
  std::optional<RendezvousInfo> rendezvous_round(std::exception_ptr& error) {
    std::optional<RendezvousInfo> result;
    std::atomic<bool> done{false};
    std::thread t([&] {
      try {
        result = rdzv_->next_rendezvous();
      } catch (...) {
        error = std::current_exception();
      }
      done = true;
      asio::post(io_, [this] { io_.stop(); });
    });
    io_.restart();
    while (!done && signalled_ == 0) {
      io_.run();
      io_.restart();
    }
    if (!done) {
      t.detach();  // blocked in the store; the process exits now
      return std::nullopt;
    }
    t.join();
    return result;
  }

  int loop() {
    int restarts_left = spec_.max_restarts;
    for (;;) {
      std::exception_ptr error;
      auto info = rendezvous_round(error);
      if (signalled_) return exit_signalled();
      if (error) {
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "ccrun: %s\n", e.what());
        }
        return 1;
      }
      info_ = *info;
      spdlog::info("ccrun: attempt {} (round {}): node {} of {}, ranks {}..{} of {}, master {}:{}",
                   restart_count_, info_.round, info_.node_rank, info_.num_nodes,
                   info_.rank_offset, info_.rank_offset + spec_.nproc_per_node - 1,
                   info_.world_size, info_.master_addr, info_.master_port);
      Outcome outcome = run_attempt();
      if (outcome == Outcome::kSucceeded) {
        rdzv_->leave(server_ != nullptr, milliseconds(60'000));
        return 0;
      }
      if (outcome == Outcome::kSignalled) return exit_signalled();

      RoundEvent ev;
      ev.kind = RoundEvent::Kind::kRestartRequested;  // a failure here
      if (event_) {
        ev = *event_;
      } else if (!local_failures_.empty()) {
        ev.detail = local_failures_.front().to_json();
      }
      if (ev.kind == RoundEvent::Kind::kRestartRequested && !ev.detail.empty()) {
        Failure f = Failure::from_json(ev.detail);
        spdlog::warn("ccrun: the group stops: node {} rank {} failed ({}, pid {})", f.node_rank,
                     f.rank, f.signal ? signal_name(f.signal) : "exit code " + std::to_string(f.exit_code),
                     f.pid);
      } else if (ev.kind == RoundEvent::Kind::kNodeDead) {
        spdlog::warn("ccrun: the group stops: {}", ev.detail);
      }
      bool counts = true;
      std::string fatal;
      switch (ev.kind) {
        case RoundEvent::Kind::kNodeWaiting:
          counts = false;
          break;
        case RoundEvent::Kind::kNodeDead:
          dead_node_ = ev;
          if (spec_.rdzv.backend == "static" || info_.num_nodes - 1 < spec_.min_nodes) {
            fatal = ev.detail + "; the job needs " + std::to_string(spec_.min_nodes) +
                    " nodes";
          }
          break;
        case RoundEvent::Kind::kClosed:
          fatal = ev.detail.empty() ? "the job was stopped on another node" : ev.detail;
          break;
        default:
          break;
      }
      if (fatal.empty() && counts && restarts_left == 0) {
        fatal = "no restarts left (--max-restarts " + std::to_string(spec_.max_restarts) + ")";
      }
      if (!fatal.empty()) {
        report(fatal);
        rdzv_->set_closed(fatal);
        rdzv_->leave(server_ != nullptr, milliseconds(10'000));
        return 1;
      }
      if (counts) {
        --restarts_left;
        ++restart_count_;
        spdlog::warn("ccrun: restarting the workers ({} restart(s) left)", restarts_left);
      } else {
        spdlog::info("ccrun: membership changed; restarting the workers in a new round");
      }
    }
  }

  int exit_signalled() {
    try {
      rdzv_->set_closed("ccrun received " + signal_name(signalled_) + " on node " +
                        std::to_string(info_.node_rank));
    } catch (const Error&) {
    }
    return 128 + signalled_;
  }

  fs::path attempt_dir() const {
    return logs_root() / ("attempt_" + std::to_string(restart_count_));
  }

  fs::path logs_root() const {
    if (!spec_.logs.log_dir.empty()) return fs::path(spec_.logs.log_dir) / run_id_;
    return tmp_root();
  }

  const fs::path& tmp_root() const {
    if (tmp_dir_.empty()) {
      std::string tmpl = (fs::temp_directory_path() / "ccrun-XXXXXX").string();
      if (mkdtemp(tmpl.data())) tmp_dir_ = tmpl;
    }
    return tmp_dir_;
  }

  Outcome run_attempt() {
    event_.reset();
    local_failures_.clear();
    outcome_.reset();
    stopping_ = false;
    exited_ok_ = 0;
    logs_ = std::make_unique<LogMux>(io_);
    group_ = std::make_unique<WorkerGroup>(io_, *logs_);
    EnvContext ctx{&spec_, &info_, run_id_, restart_count_, store_opts_.host,
                   store_opts_.port, gloo_ifname_};
    bool files = !spec_.logs.log_dir.empty();
    std::vector<WorkerSpec> specs;
    for (int lr = 0; lr < spec_.nproc_per_node; ++lr) {
      WorkerSpec w;
      w.local_rank = lr;
      w.rank = info_.rank_offset + lr;
      fs::path dir = attempt_dir() / std::to_string(w.rank);
      std::error_code ec;
      fs::create_directories(dir, ec);
      std::string error_file = (dir / "error.json").string();
      fs::remove(error_file, ec);
      w.argv = spec_.entrypoint;
      w.env = worker_environment(ctx, lr, error_file);
      auto bits = [&](const std::map<int, int>& m, int def) {
        auto it = m.find(lr);
        return it == m.end() ? def : it->second;
      };
      int redirect = bits(spec_.logs.redirects, spec_.logs.default_redirects);
      bool shown = spec_.logs.local_ranks_filter.empty() ||
                   spec_.logs.local_ranks_filter.count(lr);
      std::string prefix = spec_.logs.prefix_lines ? "[" + std::to_string(w.rank) + "]:" : "";
      w.out = {prefix, shown && !(redirect & 1), 1, files ? (dir / "stdout.log").string() : ""};
      w.err = {prefix, shown && !(redirect & 2), 2, files ? (dir / "stderr.log").string() : ""};
      specs.push_back(std::move(w));
    }
    try {
      group_->start(specs, [this](const WorkerExit& e) { on_worker_exit(e); });
    } catch (const Error& e) {
      std::fprintf(stderr, "ccrun: %s\n", e.what());
      Failure f = node_failure(e.what());
      local_failures_.push_back(f);
      rdzv_->request_restart(f.to_json());
      outcome_ = Outcome::kFailedHere;
    }
    rdzv_->watch([this](const RoundEvent& ev) {
      asio::post(io_, [this, ev] { on_round_event(ev); });
    });
    io_.restart();
    while (!outcome_) {
      io_.run();
      io_.restart();
    }
    rdzv_->shutdown();
    Outcome o = *outcome_;
    group_.reset();
    return o;
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

  void on_worker_exit(const WorkerExit& e) {
    if (!e.failed()) {
      if (++exited_ok_ == spec_.nproc_per_node && !stopping_) {
        try {
          rdzv_->mark_done();
        } catch (const Error& err) {
          spdlog::error("ccrun: exit barrier: {}", err.what());
        }
      }
      return;
    }
    if (stopping_) return;  // stopped by us: not a root cause
    Failure f = node_failure(
        read_error_file((attempt_dir() / std::to_string(e.rank) / "error.json").string()));
    f.rank = e.rank;
    f.local_rank = e.local_rank;
    f.pid = e.pid;
    f.exit_code = e.exit_code;
    f.signal = e.signal;
    f.time_ms = std::chrono::duration_cast<milliseconds>(e.time.time_since_epoch()).count();
    f.stderr_tail = e.stderr_tail;
    local_failures_.push_back(f);
    spdlog::error("ccrun: worker rank {} (pid {}) failed: {}", e.rank, e.pid,
                  e.signal ? signal_name(e.signal) : "exit code " + std::to_string(e.exit_code));
    stopping_ = true;
    try {
      rdzv_->request_restart(f.to_json());
    } catch (const Error& err) {
      spdlog::error("ccrun: cannot tell the other nodes: {}", err.what());
    }
    group_->stop(spec_.stop_grace, [this] { finish(Outcome::kFailedHere); });
  }

  void on_round_event(const RoundEvent& ev) {
    if (outcome_) return;
    if (!event_) event_ = ev;
    if (ev.kind == RoundEvent::Kind::kAllDone) {
      finish(Outcome::kSucceeded);
      return;
    }
    if (stopping_) return;
    stopping_ = true;
    group_->stop(spec_.stop_grace, [this] { finish(Outcome::kRoundEnded); });
  }

  void finish(Outcome o) {
    if (!outcome_) outcome_ = o;
    io_.stop();
  }

  void report(const std::string& reason) {
    std::vector<Failure> all;
    try {
      for (const auto& j : rdzv_->failures()) all.push_back(Failure::from_json(j));
    } catch (const Error&) {
      all = local_failures_;
    }
    if (all.empty() && dead_node_) {
      Failure f;
      f.node_rank = dead_node_->node_rank;
      f.message = dead_node_->detail;
      f.time_ms = now_ms();
      f.attempt = restart_count_;
      all.push_back(f);
    }
    std::string text = format_report(run_id_, all);
    std::fprintf(stderr, "%s  reason    : %s\n", text.c_str(), reason.c_str());
    if (!spec_.logs.log_dir.empty()) {
      std::ofstream(logs_root() / "failure_report.json") << report_json(run_id_, all) << "\n";
    }
  }

  void cleanup() {
    rdzv_.reset();
    if (server_) server_->stop();
    if (!tmp_dir_.empty()) {
      std::error_code ec;
      fs::remove_all(tmp_dir_, ec);
    }
  }

  const JobSpec& spec_;
  asio::io_context io_{1};
  asio::signal_set signals_;
  int signalled_ = 0;

  std::unique_ptr<rendezvous::StoreServer> server_;
  rendezvous::TcpStoreOptions store_opts_;
  std::shared_ptr<rendezvous::TcpStore> store_;
  std::unique_ptr<rendezvous::RendezvousHandler> rdzv_;
  std::string run_id_, local_addr_, gloo_ifname_;
  mutable fs::path tmp_dir_;

  RendezvousInfo info_;
  int restart_count_ = 0;
  std::unique_ptr<LogMux> logs_;
  std::unique_ptr<WorkerGroup> group_;
  std::optional<Outcome> outcome_;
  std::optional<RoundEvent> event_, dead_node_;
  std::vector<Failure> local_failures_;
  bool stopping_ = false;
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
