// Spawning, watching and stopping one node's workers (see worker_group.h).
#include "worker_group.h"

#include <fcntl.h>
#include <linux/mempolicy.h>
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <spdlog/spdlog.h>

#include "ccrun/error.h"
#include "ccrun/progress.h"
#include "ccrun/signal_names.h"
#include "descendants.h"
#include "orphan_killer.h"

namespace ccrun::agent {
namespace asio = boost::asio;

struct WorkerGroup::Worker {
  Worker(asio::io_context& io, pid_t pid) : pid(pid), watch(io, pid), rescan(io) {}
  std::string token;  // WorkerSpec::token (the spec itself is not kept)
  pid_t pid = 0;
  int64_t spawned_ns = 0;  // CLOCK_MONOTONIC
  ProcessWatch watch;  // watch.reaped(): its exit was collected
  int out_stream = -1, err_stream = -1;
  int open_pipes = 2;
  bool reported = false;
  WorkerExit exit;
  asio::steady_timer rescan;  // reaped, pipes still open: scan for escaped holders again
  int left_in_group = 0;       // its group's members still running at its exit (killed then)
  int escaped = 0;             // descendants outside that group killed since its exit
};

namespace {

#ifndef MPOL_PREFERRED_MANY
#define MPOL_PREFERRED_MANY 5  // Linux 5.15's uapi value, for older headers
#endif

void write_str(int fd, const char* s) {
  ssize_t r = ::write(fd, s, std::strlen(s));
  (void)r;
}

// --numa-binding, in the child: raw system calls on masks the agent built.
// A CPU mask the kernel refuses ends the worker (torch fails the launch); the
// memory preference is advice, and a kernel without MPOL_PREFERRED_MANY
// (before 5.15) keeps its default, local allocation, which the CPU binding
// already makes near.
void apply_placement(const void* arg) {
  const Placement& p = *static_cast<const Placement*>(arg);
  if (!p.cpus.empty() &&
      syscall(SYS_sched_setaffinity, 0, p.cpus.size() * sizeof(unsigned long), p.cpus.data()) != 0) {
    int err = errno;
    write_str(2, "ccrun: --numa-binding: cannot bind the worker to its CPUs: ");
    write_str(2, std::strerror(err));
    write_str(2, "\n");
    _exit(127);
  }
  if (!p.nodes.empty()) {
    long mode = p.node_count > 1 ? MPOL_PREFERRED_MANY : MPOL_PREFERRED;
    long r = syscall(SYS_set_mempolicy, mode, p.nodes.data(), p.nodes.size() * 64 + 1);
    (void)r;  // advice only: see above
  }
}

// Starts a worker through `starter`. When it cannot, says why, and clears
// `starter`: this worker and the rest start cold.
pid_t start_with(WorkerStarter*& starter, const WorkerSpec& spec, int out_fd, int err_fd) {
  try {
    return starter->start(spec, out_fd, err_fd);
  } catch (const Error& e) {
    spdlog::warn("ccrun: rank {} and the next start cold: {}", spec.rank, e.what());
    starter = nullptr;
    return -1;
  }
}

}  // namespace

WorkerGroup::~WorkerGroup() {
  if (kill_timer_) kill_timer_->cancel();
  for (auto& w : workers_) {
    w->rescan.cancel();
    if (!w->watch.reaped()) {
      w->watch.kill_and_reap();
      OrphanKiller::instance().untrack(w->pid);
    }
    w->watch.close();  // its pending wait completes as aborted
  }
  // Pipe callbacks point at this group: none may run after it is gone.
  logs_.close_all();
  if (!agent_token_.empty()) {
    kill_holders(agent_token_, true);  // every worker was reaped above
    OrphanKiller::instance().disarm();  // nothing of the job is left to scan for
  }
}

// The workers not reaped yet (their subtrees are theirs, not orphans) and
// the orphan killer: the agent's children that no walk enters.
std::vector<pid_t> WorkerGroup::live_pids() const {
  std::vector<pid_t> out;
  if (pid_t killer = OrphanKiller::instance().pid()) out.push_back(killer);
  for (const auto& w : workers_) {
    if (!w->watch.reaped()) out.push_back(w->pid);
  }
  return out;
}

// Kills the descendants of the workers that hold `token` (see
// descendants.h): a walk of the agent's own tree, the live workers'
// subtrees left out.
int WorkerGroup::kill_holders(const std::string& token, bool with_children,
                              pid_t signalled_group) {
  if (token.empty()) return 0;
  std::vector<pid_t> live = live_pids();
  return kill_tree_holders(token.c_str(), with_children, live.data(), live.size(),
                           signalled_group);
}

std::vector<pid_t> WorkerGroup::pids() const {
  std::vector<pid_t> out;
  for (const auto& w : workers_) out.push_back(w->watch.reaped() ? 0 : w->pid);
  return out;
}

std::vector<int64_t> WorkerGroup::spawn_times() const {
  std::vector<int64_t> out;
  for (const auto& w : workers_) out.push_back(w->spawned_ns);
  return out;
}

void WorkerGroup::start(int count, const std::function<WorkerSpec(int)>& make,
                        std::function<void(const WorkerExit&)> on_exit, WorkerStarter* starter) {
  on_exit_ = std::move(on_exit);
  // Orphaned descendants (setsid'd included) reparent to the agent, where
  // kill_holders finds them (descendants.h).
  become_subreaper();
  // The children's stack and the dispositions they reset, once per group
  // (ccrun sets its dispositions at start-up, never while spawning).
  Spawner spawner;
  for (int i = 0; i < count; ++i) {
    const WorkerSpec spec = make(i);
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      throw Error(std::string("cannot create pipes for a worker: ") + std::strerror(errno));
    }
    int64_t spawned_ns = progress::monotonic_ns();
    pid_t pid = -1;
    if (starter) {
      pid = start_with(starter, spec, out[1], err[1]);
      if (pid > 0) setpgid(pid, pid);  // also here: no race with the first kill(-pgid)
    }
    if (!starter) {  // Spawner::spawn makes the child its group's leader itself
      ProcessImage image(spec.argv, &spec.env);
      SpawnOptions o;
      o.stdin_fd = spec.stdin_fd, o.stdout_fd = out[1], o.stderr_fd = err[1];
      o.before_exec = apply_placement, o.before_exec_arg = &spec.placement;
      o.control_fd = spec.pmi_fd;  // becomes its descriptor 3
      pid = spawner.spawn(image, o);
    }
    if (pid < 0) {
      int err_no = errno;
      ::close(out[0]), ::close(out[1]), ::close(err[0]), ::close(err[1]);
      throw Error(std::string("cannot start worker ") + std::to_string(spec.rank) + ": clone: " +
                  std::strerror(err_no));
    }
    OrphanKiller::instance().track(pid);
    ::close(out[1]);
    ::close(err[1]);
    auto w = std::make_shared<Worker>(io_, pid);
    w->token = spec.token;
    w->spawned_ns = spawned_ns;
    w->exit.local_rank = spec.local_rank;
    w->exit.rank = spec.rank;
    w->exit.pid = pid;
    w->out_stream = logs_.add(out[0], spec.out, [this, w] { --w->open_pipes; maybe_finish(w); });
    w->err_stream = logs_.add(err[0], spec.err, [this, w] { --w->open_pipes; maybe_finish(w); });
    workers_.push_back(w);
    ++running_;
    w->watch.async_wait([this, w](ExitStatus s) { on_reaped(w, s); });
  }
}

void WorkerGroup::on_reaped(const std::shared_ptr<Worker>& w, ExitStatus s) {
  w->exit.time = std::chrono::system_clock::now();
  w->exit.signal = s.signal;
  w->exit.exit_code = s.exit_code;
  --running_;
  // The worker's group may hold children that keep its pipes open: they die
  // with it.
  w->left_in_group = kill_process_group(w->pid);
  // So may its descendants that left the group (setsid): they are in the
  // agent's tree (it is their subreaper), found there by the worker's token.
  w->escaped = kill_holders(w->token, false, w->pid);
  OrphanKiller::instance().untrack(w->pid);
  logs_.wake(w->out_stream);  // its pipes' end is seen at once, not at the output tick
  logs_.wake(w->err_stream);
  if (w->open_pipes > 0) rescan_holders(w, std::chrono::milliseconds(100));
  maybe_finish(w);
}

// An orphan caught in the middle of an exec has no readable environ, so the
// walk at the worker's exit can miss it (what lies below a token holder dies
// whatever its environ; only the orphans the agent adopted are read). If it
// holds the worker's pipes, they never close and the group never finishes.
// Walk the agent's tree again while they stay open (100 ms, then doubling up
// to 2 s): a cost only when something escaped, and only the job's processes.
void WorkerGroup::rescan_holders(const std::shared_ptr<Worker>& w, std::chrono::milliseconds after) {
  if (w->token.empty()) return;
  w->rescan.expires_after(after);
  w->rescan.async_wait([this, w, after](boost::system::error_code ec) {
    if (ec || w->open_pipes == 0) return;
    w->escaped += kill_holders(w->token, false);
    rescan_holders(w, std::min(after * 2, std::chrono::milliseconds(2000)));
  });
}

void WorkerGroup::maybe_finish(const std::shared_ptr<Worker>& w) {
  if (!w->watch.reaped() || w->open_pipes > 0 || w->reported) return;
  w->reported = true;
  // Said once its pipes closed, so that the count holds what the rescans
  // found too (one caught mid-exec at the exit is found by them).
  if (int left = w->left_in_group + w->escaped; left > 0) {
    spdlog::info("ccrun: rank {} (pid {}) exited and left {} process{} running (background jobs "
                 "it started{}); ccrun killed {}",
                 w->exit.rank, w->pid, left, left == 1 ? "" : "es",
                 w->escaped > 0 ? fmt::format(", {} outside its process group", w->escaped) : "",
                 left == 1 ? "it" : "them");
  }
  w->exit.stderr_tail = logs_.tail(w->err_stream);
  if (on_exit_) on_exit_(w->exit);
  bool all = true;
  for (auto& x : workers_) all = all && x->reported;
  if (all && !agent_token_.empty()) {
    kill_holders(agent_token_, true);
    OrphanKiller::instance().disarm();  // until the next start() tracks a group
  }
  if (all && stopped_) {
    if (kill_timer_) kill_timer_->cancel();
    auto done = std::move(stopped_);
    stopped_ = nullptr;
    done();
  }
}

void WorkerGroup::signal_all(int sig) {
  for (auto& w : workers_) {
    // With SIGCONT: a stopped rank stops within --stop-grace like the others.
    if (!w->watch.reaped()) signal_process_group(w->pid, sig);
  }
}

void WorkerGroup::stop(std::chrono::milliseconds grace, std::function<void()> done, int sig) {
  bool all = true;
  for (auto& x : workers_) all = all && x->reported;
  if (all) {
    asio::post(io_, std::move(done));
    return;
  }
  bool under_way = stopped_ != nullptr;
  stopped_ = std::move(done);
  if (under_way) return;
  logs_.wake_all();  // what the workers printed before the stop is read now, not a tick later
  signal_all(sig);
  kill_timer_ = std::make_unique<asio::steady_timer>(io_, grace);
  kill_timer_->async_wait([this, grace, sig](boost::system::error_code ec) {
    if (ec) return;
    std::vector<std::string> left;
    for (const auto& w : workers_) {
      if (w->watch.reaped()) continue;
      left.push_back(fmt::format("rank {} (pid {})", w->exit.rank, w->pid));
    }
    if (!left.empty()) {
      spdlog::warn("ccrun: {} still running {:.1f}s after {} (--stop-grace); killing with SIGKILL",
                   fmt::join(left, ", "), std::chrono::duration<double>(grace).count(), signal_name(sig));
    }
    signal_all(SIGKILL);
  });
}

}  // namespace ccrun::agent
