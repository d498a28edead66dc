//===- worker_group.h - The worker processes of one node --------*- C++ -*-===//
//
// `WorkerGroup` spawns one node's workers and watches them on the agent's
// io_context. Each worker runs in its own process group, is killed if the
// agent dies (PR_SET_PDEATHSIG, plus a check that the agent is still its
// parent after fork), and has its exit collected through a pidfd: no
// polling, no SIGCHLD handler. The agent is the workers' child subreaper:
// what a worker leaves behind (setsid'd processes included) reparents to
// it and is killed, and reaped, by a walk of the agent's own process tree
// when the worker exits (descendants.h); the waitpid of a worker names its
// pid, so a reparented zombie is never taken for a worker.
//
//   WorkerGroup group(io, logs);
//   group.start(n, [&](int i) { return spec_of(i); }, [](const WorkerExit& e) { ... });
//   group.stop(30s, [] { /* every worker reaped */ });
//
//===----------------------------------------------------------------------===//
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <utility>
#include <boost/asio.hpp>
#include <chrono>
#include <csignal>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "log_mux.h"
#include "process.h"

namespace ccrun::agent {

// Where a worker runs (--numa-binding), as bit masks the child hands to
// sched_setaffinity and set_mempolicy before it execs.
struct Placement {
  std::vector<unsigned long> cpus;   // CPU mask; empty = the agent's affinity
  std::vector<unsigned long> nodes;  // preferred NUMA nodes; empty = the default policy
  int node_count = 0;                // bits set in `nodes`
};

// How to start one worker.
struct WorkerSpec {
  int local_rank = 0;
  int rank = 0;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "NAME=value", the whole environment
  StreamOptions out, err;        // where its stdout and stderr go
  int stdin_fd = -1;             // what it reads as stdin: -1 = /dev/null, else
                                 // a descriptor of the agent's (its own stdin)
  std::string token;             // its CCRUN_AGENT_TOKEN ("" = none): every
                                 // process holding it dies when it exits
  Placement placement;
  int pmi_fd = -1;               // --mpi: a descriptor of the agent's the worker
                                 // holds as its descriptor 3 (PMI_FD); -1: none
};

// How one worker ended.
struct WorkerExit {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = 0;
  int exit_code = 0;  // when it exited
  int signal = 0;     // when a signal killed it (then exit_code is 128+N)
  std::chrono::system_clock::time_point time;
  std::string stderr_tail;  // its last stderr lines
  bool failed() const { return exit_code != 0 || signal != 0; }
};

// How a worker's process comes to be. The group's own way is clone and
// exec; a warm start forks it from a template interpreter that has imported
// the program's modules (warm_template.h). Either way the worker is a child
// of the agent, so everything after the start is the same.
class WorkerStarter {
 public:
  virtual ~WorkerStarter() = default;
  // Starts `spec`'s process, a child of this process, with `out_fd` and
  // `err_fd` (the write ends of its pipes) as its stdout and stderr and
  // `spec.stdin_fd` as its stdin, in a
  // process group of its own, killed if the agent dies; returns its pid.
  // Throws ccrun::Error when it cannot.
  virtual pid_t start(const WorkerSpec& spec, int out_fd, int err_fd) = 0;
};

// One attempt's worker processes, as the agent drives them. WorkerGroup is
// the real one; the agent's unit tests drive the agent's loop and its
// attempts through a fake that spawns nothing (tests/agent/agent_loop_test.cpp).
// Every callback runs on the agent's io_context.
class Workers {
 public:
  virtual ~Workers() = default;
  // Starts `count` workers, `make(i)` building each one's spec just before it
  // starts; `on_exit` runs once per worker once it ended (and its output was
  // drained). `starter` null: the group's own way. Throws ccrun::Error when a
  // worker cannot be started.
  virtual void start(int count, const std::function<WorkerSpec(int)>& make,
                     std::function<void(const WorkerExit&)> on_exit,
                     WorkerStarter* starter = nullptr) = 0;
  // Sends `sig` to every running worker.
  virtual void signal_all(int sig) = 0;
  // `sig` to every running worker, SIGKILL to those left after `grace`;
  // `done` once none runs (at once when none does). A stop while one is
  // under way only replaces `done`.
  virtual void stop(std::chrono::milliseconds grace, std::function<void()> done,
                    int sig = SIGTERM) = 0;
  // A stop is under way.
  virtual bool stopping() const = 0;
  // SIGKILL to every running worker now (a second Ctrl-C).
  virtual void kill_now() = 0;
  virtual size_t running() const = 0;
  // Each started worker's pid, in start order (0 once it was reaped).
  virtual std::vector<pid_t> pids() const = 0;
  // When each started worker was spawned (CLOCK_MONOTONIC ns), in start order.
  virtual std::vector<int64_t> spawn_times() const = 0;
};

class WorkerGroup final : public Workers {
 public:
  // `agent_token`: the CCRUN_AGENT_TOKEN in the workers' environment (see
  // descendants.h); "" when none.
  WorkerGroup(boost::asio::io_context& io, LogMux& logs, std::string agent_token = "")
      : io_(io), logs_(logs), agent_token_(std::move(agent_token)) {}
  // SIGKILLs what still runs, descendants included, and cancels every
  // pending handler of the group (no callback runs after this).
  ~WorkerGroup() override;
  WorkerGroup(const WorkerGroup&) = delete;  // owns processes
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Spawns `count` workers whose specs `make(i)` builds one at a time, each
  // freed once its worker runs (an environment is ~7 KiB; 128 of them at
  // once were most of the launcher's peak heap). `on_exit` runs on the
  // io_context once per worker, after its output pipes were drained.
  // `starter` starts each process (null: clone and exec here). Throws
  // ccrun::Error when a process cannot be created.
  void start(int count, const std::function<WorkerSpec(int)>& make,
             std::function<void(const WorkerExit&)> on_exit,
             WorkerStarter* starter = nullptr) override;

  // Sends `sig` to every running worker's process group.
  void signal_all(int sig) override;

  // `sig` (SIGTERM, or the signal a user sent ccrun) to every running
  // worker, SIGKILL to those left after `grace`; `done` runs once none is
  // left (at once when none runs), after every descendant that carries the
  // agent's token was killed too. A stop while one is under way only
  // replaces `done`: the grace period keeps running.
  void stop(std::chrono::milliseconds grace, std::function<void()> done,
            int sig = SIGTERM) override;

  // A stop is under way (its grace period runs).
  bool stopping() const override { return stopped_ != nullptr; }

  // SIGKILL to every running worker's group now (a second Ctrl-C).
  void kill_now() override { signal_all(SIGKILL); }

  size_t running() const override { return running_; }

  // Each started worker's pid, in start order (0 once it was reaped).
  std::vector<pid_t> pids() const override;

  // When each started worker was spawned (CLOCK_MONOTONIC ns), in start order.
  std::vector<int64_t> spawn_times() const override;

 private:
  struct Worker;
  void on_reaped(const std::shared_ptr<Worker>& w, ExitStatus s);
  void maybe_finish(const std::shared_ptr<Worker>& w);
  void rescan_holders(const std::shared_ptr<Worker>& w, std::chrono::milliseconds after);
  std::vector<pid_t> live_pids() const;
  // Kills them (descendants.h); returns how many, less those of
  // `signalled_group` (already SIGKILLed, maybe not dead yet).
  int kill_holders(const std::string& token, bool with_children, pid_t signalled_group = 0);

  boost::asio::io_context& io_;
  LogMux& logs_;
  std::vector<std::shared_ptr<Worker>> workers_;
  std::function<void(const WorkerExit&)> on_exit_;
  size_t running_ = 0;
  std::unique_ptr<boost::asio::steady_timer> kill_timer_;
  std::function<void()> stopped_;
  std::string agent_token_;
};

}  // namespace ccrun::agent
