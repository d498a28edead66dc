// The agent's loop and its attempts driven through fakes (AgentParts): a
// rendezvous that ends rounds as the test says and workers that exit as the
// test says, no process spawned and no store opened. Each case runs the
// real Agent::run() to its end and checks its exit status, the calls it made
// to the rendezvous and the events it wrote (events.jsonl).
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent_impl.h"
#include "ccrun/error.h"

using namespace ccrun;
using namespace ccrun::agent;
using rendezvous::RendezvousInfo;
using rendezvous::RoundEvent;
namespace asio = boost::asio;
namespace fs = std::filesystem;
using std::chrono::milliseconds;

namespace {

// A rendezvous of one node whose rounds end as the real one ends them for
// the calls the agent makes (a restart request ends the round with that
// failure; the exit barrier passes once this node is done), plus what the
// test injects at a round's start (another node dead, the store lost).
// What the agent asked of the rendezvous (the test owns it: the agent
// destroys its handler before run() returns).
struct RendezvousCalls {
  std::atomic<int> rounds{0}, restart_requests{0}, marks{0}, leaves{0}, closes{0};
  std::atomic<int> last_attempt{-1}, closed_signal{0};
  std::atomic<int> left_on_failure{0}, stand_bys{0};
};

class FakeRendezvous final : public rendezvous::RendezvousHandler {
 public:
  explicit FakeRendezvous(RendezvousCalls& calls) : calls_(calls) {}
  // Called once the agent watches round `round`; may end it (end()).
  std::function<void(FakeRendezvous&, int round)> on_watch;

  RendezvousInfo next_rendezvous() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) throw RendezvousClosedError("the job was closed: " + closed_reason_);
    RendezvousInfo info;
    info.round = rounds_++;
    ++calls_.rounds;
    info.num_nodes = 2;  // this node and one the test speaks for
    info.world_size = 4;
    info.master_addr = "127.0.0.1";
    info.master_port = 29500;
    failures_.clear();
    ended_ = false;
    return info;
  }
  void watch(std::function<void(const RoundEvent&)> on_event) override {
    int round;
    {
      std::lock_guard<std::mutex> lock(mu_);
      on_event_ = std::move(on_event);
      round = rounds_ - 1;
    }
    if (on_watch) on_watch(*this, round);
  }
  bool request_restart(const Failure& f, bool leaves) override {
    calls_.left_on_failure += leaves ? 1 : 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      failures_.push_back(f);
      ++calls_.restart_requests;
    }
    RoundEvent ev;
    ev.kind = RoundEndKind::kRestartRequested;
    ev.node_rank = f.node_rank;  // the requester, as the real handler's end names it
    ev.failure = f;
    ev.detail = f.message;
    return end(ev);
  }
  void mark_done() override {
    ++calls_.marks;
    RoundEvent ev;
    ev.kind = RoundEndKind::kAllDone;
    end(ev);
  }
  void set_closed(const ClosedRecord& r) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
      closed_reason_ = r.reason;
      ++calls_.closes;
      calls_.closed_signal = r.stop_signal;
    }
    RoundEvent ev;
    ev.kind = RoundEndKind::kClosed;
    ev.detail = r.reason;
    end(ev);
  }
  std::vector<Failure> failures() override {
    std::lock_guard<std::mutex> lock(mu_);
    return failures_;
  }
  void leave(bool, milliseconds) override { ++calls_.leaves; }
  int spares_waiting() override { return spares; }
  bool waiting_as_spare() const override { return false; }
  StandByEnd stand_by(int64_t, bool, milliseconds) override {
    ++calls_.stand_bys;
    return stand_by_end;
  }
  int spares = 0;  // what spares_waiting() says
  StandByEnd stand_by_end = StandByEnd::kFinished;  // what stand_by() says
  void shutdown() override {
    std::lock_guard<std::mutex> lock(mu_);
    on_event_ = nullptr;
  }
  void set_attempt(int attempt) override { calls_.last_attempt = attempt; }
  void set_progress(std::vector<RankView>) override {}
  void publish_status() override {}
  std::vector<std::optional<NodeStatus>> node_statuses() override { return {}; }
  void publish_hang_evidence(const std::string&) override {}
  std::vector<std::string> hang_evidence(milliseconds) override { return {}; }
  bool await_hang_evidence(milliseconds) override { return true; }

  // Returns whether this end was the round's first, watched or not (as the
  // real one's compare-and-set: a request made after the watch stopped still
  // ends the round).
  bool end(const RoundEvent& ev) {
    std::function<void(const RoundEvent&)> deliver;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ended_) return false;
      ended_ = true;
      deliver = on_event_;
    }
    if (deliver) deliver(ev);
    return true;
  }

 private:
  RendezvousCalls& calls_;
  std::mutex mu_;
  int rounds_ = 0;
  bool closed_ = false, ended_ = false;
  std::string closed_reason_;
  std::vector<Failure> failures_;
  std::function<void(const RoundEvent&)> on_event_;
};

// How each worker of an attempt ends: an exit code, "runs until stopped",
// or "cannot start" (start() throws, as a failed clone does).
constexpr int kRuns = -1;
constexpr int kCannotStart = -2;

// Workers that never exist: start() builds every spec (the real builder of
// a worker's environment runs) and then each worker ends as the test's plan
// for that attempt says; a stop ends the running ones by the stop's signal.
class FakeWorkers final : public Workers {
 public:
  struct Log {
    std::vector<std::vector<WorkerSpec>> specs;  // by attempt
    std::vector<int> stop_signals;               // every stop's signal
    int kills = 0;
  };
  // plan: the exit code of each local rank (kRuns: until stopped).
  FakeWorkers(asio::io_context& io, std::vector<int> plan, Log& log, std::function<void()> started)
      : io_(io), plan_(std::move(plan)), log_(log), started_(std::move(started)) {}

  void start(int count, const std::function<WorkerSpec(int)>& make,
             std::function<void(const WorkerExit&)> on_exit, WorkerStarter*) override {
    on_exit_ = std::move(on_exit);
    log_.specs.emplace_back();
    for (int i = 0; i < count; ++i) {
      if (i < int(plan_.size()) && plan_[size_t(i)] == kCannotStart) {
        throw Error("cannot start worker " + std::to_string(i) + ": clone: out of memory");
      }
      WorkerSpec spec = make(i);
      log_.specs.back().push_back(spec);
      ranks_.push_back(spec.rank);
      running_.push_back(true);
    }
    for (int i = 0; i < count; ++i) {
      int code = i < int(plan_.size()) ? plan_[size_t(i)] : 0;
      if (code >= 0) asio::post(io_, [this, i, code] { exit(i, code, 0); });
    }
    if (started_) asio::post(io_, started_);
  }
  void signal_all(int sig) override { log_.stop_signals.push_back(sig); }
  void stop(milliseconds, std::function<void()> done, int sig) override {
    log_.stop_signals.push_back(sig);
    for (size_t i = 0; i < running_.size(); ++i) {
      if (running_[i]) exit(int(i), 128 + sig, sig);
    }
    asio::post(io_, std::move(done));
  }
  bool stopping() const override { return false; }
  void kill_now() override { ++log_.kills; }
  size_t running() const override {
    return size_t(std::count(running_.begin(), running_.end(), true));
  }
  std::vector<pid_t> pids() const override { return std::vector<pid_t>(running_.size(), 0); }
  std::vector<int64_t> spawn_times() const override {
    return std::vector<int64_t>(running_.size(), progress::monotonic_ns());
  }

 private:
  void exit(int lr, int code, int sig) {
    if (!running_[size_t(lr)]) return;
    running_[size_t(lr)] = false;
    WorkerExit e;
    e.local_rank = lr;
    e.rank = ranks_[size_t(lr)];
    e.pid = 1000 + lr;
    e.exit_code = code;
    e.signal = sig;
    e.time = std::chrono::system_clock::now();
    on_exit_(e);
  }

  asio::io_context& io_;
  std::vector<int> plan_;
  Log& log_;
  std::function<void()> started_;
  std::function<void(const WorkerExit&)> on_exit_;
  std::vector<int> ranks_;
  std::vector<bool> running_;
};

// One run of the real agent over the fakes.
struct Run {
  JobSpec spec;
  std::vector<std::vector<int>> plans;  // by attempt; the last one repeats
  std::function<void(int attempt)> on_started;  // the attempt's workers started
  RendezvousCalls rdzv;
  FakeWorkers::Log workers;
  fs::path logs = fs::temp_directory_path() / ("ccrun-agent-loop-" + std::to_string(getpid()));

  Run() {
    spec.entrypoint = {"/bin/true"};
    spec.nproc_per_node = 2;
    spec.stop_grace = milliseconds(1000);
    spec.rdzv.id = "loop";
    spec.logs.log_dir = logs.string();
    fs::remove_all(logs);
  }
  ~Run() { fs::remove_all(logs); }

  int go(std::function<void(FakeRendezvous&, int)> on_watch = nullptr,
         std::function<void(FakeRendezvous&)> setup = nullptr) {
    auto fake = std::make_unique<FakeRendezvous>(rdzv);
    fake->on_watch = std::move(on_watch);
    if (setup) setup(*fake);
    AgentParts parts;
    parts.rendezvous = [&fake] { return std::move(fake); };
    int attempt = 0;
    parts.workers = [this, &attempt](asio::io_context& io, LogMux&, const std::string&) {
      const auto& plan = plans[std::min(size_t(attempt), plans.size() - 1)];
      int n = attempt++;
      std::function<void()> started;
      if (on_started) started = [this, n] { on_started(n); };
      return std::make_unique<FakeWorkers>(io, plan, workers, started);
    };
    Agent agent(spec, std::move(parts));
    return agent.run();
  }

  // The run's folder: <log_dir>/<run id>_<random>.
  fs::path run_dir() const {
    for (const auto& e : fs::directory_iterator(logs)) return e.path();
    return {};
  }

  // The events the agent wrote, by name, in order.
  std::vector<std::string> events() const {
    std::vector<std::string> names;
    for (const auto& e : fs::recursive_directory_iterator(logs)) {
      if (e.path().filename() != "events.jsonl") continue;
      std::ifstream in(e.path());
      for (std::string line; std::getline(in, line);) {
        names.push_back(nlohmann::json::parse(line).value("event", std::string()));
      }
    }
    return names;
  }
  int count(const std::string& name) const {
    auto names = events();
    return int(std::count(names.begin(), names.end(), name));
  }
};

// A round end that another node causes, delivered once the agent watches
// round `round`.
std::function<void(FakeRendezvous&, int)> ended_elsewhere(int round, RoundEndKind kind,
                                                          std::string detail,
                                                          std::optional<Failure> failure = {}) {
  return [=](FakeRendezvous& r, int watched) {
    if (watched != round) return;
    RoundEvent ev;
    ev.kind = kind;
    ev.node_rank = 1;
    ev.detail = detail;
    ev.failure = failure;
    r.end(ev);
  };
}

}  // namespace

TEST_CASE("agent loop: every worker exits 0, the exit barrier passes, the node leaves", "[agent]") {
  Run run;
  run.plans = {{0, 0}};
  CHECK(run.go() == 0);
  CHECK(run.rdzv.rounds == 1);
  CHECK(run.rdzv.marks == 1);
  CHECK(run.rdzv.leaves == 1);
  CHECK(run.rdzv.restart_requests == 0);
  REQUIRE(run.workers.specs.size() == 1);
  // The real builder of the environment ran for each worker.
  const auto& env = run.workers.specs[0][1].env;
  CHECK(std::find(env.begin(), env.end(), "LOCAL_RANK=1") != env.end());
  CHECK(std::find(env.begin(), env.end(), "WORLD_SIZE=4") != env.end());
  CHECK(run.count("start") == 1);
  CHECK(run.count("stop") == 1);
}

TEST_CASE("agent loop: a failed worker stops the others, restarts, then the job succeeds",
          "[agent]") {
  Run run;
  run.spec.max_restarts = 2;
  run.plans = {{3, kRuns}, {0, 0}};
  CHECK(run.go() == 0);
  CHECK(run.rdzv.rounds == 2);
  CHECK(run.rdzv.restart_requests == 1);
  CHECK(run.rdzv.last_attempt == 1);
  REQUIRE(run.workers.specs.size() == 2);
  // The running rank was stopped with SIGTERM, the failed one not signalled.
  CHECK(run.workers.stop_signals == std::vector<int>{SIGTERM});
  // The second attempt's workers see the restart.
  const auto& env = run.workers.specs[1][0].env;
  CHECK(std::find(env.begin(), env.end(), "TORCHELASTIC_RESTART_COUNT=1") != env.end());
  CHECK(run.count("failure") == 1);
  CHECK(run.count("restart") == 1);
}

TEST_CASE("agent loop: failures past --max-restarts fail the job and close it", "[agent]") {
  Run run;
  run.spec.max_restarts = 1;
  run.plans = {{1, 0}};
  CHECK(run.go() == 1);
  CHECK(run.rdzv.rounds == 2);
  CHECK(run.rdzv.restart_requests == 2);
  CHECK(run.rdzv.closes == 1);
  CHECK(run.count("failure") == 2);
  CHECK(fs::exists(run.run_dir() / "failure_report.json"));
}

TEST_CASE("agent loop: a node lost elsewhere stops this node's workers and fails a static job",
          "[agent]") {
  Run run;
  run.spec.max_restarts = 3;
  run.plans = {{kRuns, kRuns}};
  int status =
      run.go(ended_elsewhere(0, RoundEndKind::kNodeDead, "node 1 sent no heartbeat for 15s"));
  CHECK(status == 1);
  CHECK(run.workers.stop_signals == std::vector<int>{SIGTERM});
  CHECK(run.rdzv.restart_requests == 0);  // the round ended elsewhere: no request from here
  std::ifstream in(run.run_dir() / "failure_report.json");
  std::string report((std::istreambuf_iterator<char>(in)), {});
  CHECK_THAT(report, Catch::Contains("node 1 sent no heartbeat for 15s"));
  CHECK_THAT(report, Catch::Contains("\"node_rank\": 1"));
}

TEST_CASE("agent loop: an elastic job restarts past a lost node without this node failing",
          "[agent]") {
  Run run;
  run.spec.max_restarts = 3;
  run.spec.rdzv.backend = rendezvous::Backend::kC10d;
  run.spec.rdzv.endpoint = "localhost:29400";  // as the launcher leaves it
  run.spec.min_nodes = 1, run.spec.max_nodes = 2;
  run.plans = {{kRuns, kRuns}, {0, 0}};
  int status =
      run.go(ended_elsewhere(0, RoundEndKind::kNodeDead, "node 1 sent no heartbeat for 15s"));
  CHECK(status == 0);
  CHECK(run.rdzv.rounds == 2);
  CHECK(run.count("failure") == 0);
}

TEST_CASE("agent loop: the store lost ends the node at once, with no restart and no request",
          "[agent]") {
  Run run;
  run.spec.max_restarts = 3;
  run.plans = {{kRuns, kRuns}};
  int status = run.go(ended_elsewhere(0, RoundEndKind::kStoreLost, "connection refused"));
  CHECK(status == 1);
  CHECK(run.rdzv.rounds == 1);  // no restart without the store
  CHECK(run.rdzv.restart_requests == 0);
}

TEST_CASE("agent loop: a hang judged on node 0 takes this node's stacks and restarts", "[agent]") {
  Run run;
  run.spec.max_restarts = 1;
  run.plans = {{kRuns, kRuns}, {0, 0}};
  Failure f;
  f.cause = FailureCause::kHang;
  f.rank = 3, f.node_rank = 1;
  f.message = "hang: rank 3 stopped at all_reduce #7";
  int status = run.go(ended_elsewhere(0, RoundEndKind::kRestartRequested, f.message, f));
  CHECK(status == 0);
  CHECK(run.rdzv.rounds == 2);
  CHECK(run.count("hang_stacks") == 1);
  CHECK(run.workers.stop_signals == std::vector<int>{SIGTERM});
}

TEST_CASE("agent loop: a stop signal stops the workers with it and closes the job", "[agent]") {
  // The signal stays pending in every thread (as ccrun holds it from load)
  // until the agent's signalfd reads it.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, &old);
  Run run;
  run.spec.max_restarts = 3;
  run.plans = {{kRuns, kRuns}};
  run.on_started = [](int) { ::kill(::getpid(), SIGTERM); };
  int status = run.go();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  CHECK(status == 128 + SIGTERM);
  CHECK(run.rdzv.rounds == 1);
  CHECK(run.workers.stop_signals == std::vector<int>{SIGTERM});
  CHECK(run.rdzv.closed_signal == SIGTERM);
}

TEST_CASE("agent loop: a worker that cannot start fails the attempt like one that exits",
          "[agent]") {
  Run run;
  run.spec.max_restarts = 1;
  run.plans = {{kRuns, kCannotStart}, {0, 0}};
  CHECK(run.go() == 0);
  CHECK(run.rdzv.rounds == 2);
  CHECK(run.rdzv.restart_requests == 1);
  // Local rank 0 had started: it is stopped.
  CHECK(run.workers.stop_signals == std::vector<int>{SIGTERM});
  CHECK(run.count("restart") == 1);
}

TEST_CASE("agent loop: a node whose workers fail first twice in a row leaves an elastic job and "
          "sits out its exclusion", "[agent][exclusion]") {
  Run run;
  run.spec.max_restarts = 5;
  run.spec.rdzv.backend = rendezvous::Backend::kC10d;
  run.spec.rdzv.endpoint = "localhost:29400";
  run.spec.min_nodes = 1, run.spec.max_nodes = 2;  // the fake's rounds have 2 nodes
  run.plans = {{1, kRuns}};                        // every attempt: local rank 0 exits 1
  int status = run.go(nullptr, [](FakeRendezvous& r) {
    r.stand_by_end = rendezvous::RendezvousHandler::StandByEnd::kFinished;
  });
  CHECK(status == 0);  // the job finished without it
  CHECK(run.rdzv.rounds == 2);
  CHECK(run.rdzv.restart_requests == 2);
  CHECK(run.rdzv.left_on_failure == 1);  // the second request took the node out
  CHECK(run.rdzv.stand_bys == 1);
  CHECK(run.count("excluded") == 1);
}

TEST_CASE("agent loop: a static job's node is never taken out for its failures",
          "[agent][exclusion]") {
  Run run;
  run.spec.max_restarts = 2;
  run.plans = {{1, kRuns}};
  int status = run.go();
  CHECK(status == 1);  // restarts spent, as before
  CHECK(run.rdzv.rounds == 3);
  CHECK(run.rdzv.left_on_failure == 0);
  CHECK(run.count("excluded") == 0);
}
