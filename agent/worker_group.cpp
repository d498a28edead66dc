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
  Worker(asio::io_context& io, int pidfd) : pidfd(io, pidfd), rescan(io) {}
  std::string token;  // WorkerSpec::token (the spec itself is not kept)
  pid_t pid = 0;
  int64_t spawned_ns = 0;  // CLOCK_MONOTONIC
  asio::posix::stream_descriptor pidfd;
  int err_stream = -1;
  int open_pipes = 2;
  bool reaped = false;
  bool reported = false;
  WorkerExit exit;
  asio::steady_timer rescan;  // reaped, pipes still open: scan for escaped holders again
};

namespace {

#ifndef MPOL_PREFERRED_MANY
#define MPOL_PREFERRED_MANY 5  // Linux 5.15's uapi value, for older headers
#endif

// Everything the child needs, built before fork (no allocation after it).
struct ExecImage {
  std::vector<std::string> storage;
  std::vector<char*> argv, envp;
  const Placement* placement = nullptr;
  ExecImage(const std::vector<std::string>& args, const std::vector<std::string>& env,
            const Placement& where)
      : placement(&where) {
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
};

void write_str(int fd, const char* s) {
  ssize_t r = ::write(fd, s, std::strlen(s));
  (void)r;
}

// --numa-binding, in the child: raw system calls on masks the agent built.
// A CPU mask the kernel refuses ends the worker (torch fails the launch); the
// memory preference is advice, and a kernel without MPOL_PREFERRED_MANY
// (before 5.15) keeps its default, local allocation, which the CPU binding
// already makes near.
void apply_placement(const Placement& p) {
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

// Runs in the child, with every signal blocked (see start()): the agent's
// handlers must never run here, since they write into the agent's own
// signal pipe (a SIGTERM meant for this worker would reach the agent).
// `not_default`: the signals whose disposition in the agent is not SIG_DFL
// (a handler or SIG_IGN; handled_signals()): only those need resetting, since
// exec resets handlers itself but keeps SIG_IGN.
[[noreturn]] void exec_child(const ExecImage& image, int out_fd, int err_fd, pid_t agent,
                             const sigset_t& not_default) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != agent) _exit(1);  // the agent died before PDEATHSIG was set
  for (int s = 1; s < NSIG; ++s) {
    if (sigismember(&not_default, s) == 1) signal(s, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, 0);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  syscall(SYS_close_range, 3u, ~0u, 0u);
  apply_placement(*image.placement);
  execvpe(image.argv[0], image.argv.data(), image.envp.data());
  int err = errno;
  write_str(2, "ccrun: cannot execute \"");
  write_str(2, image.argv[0]);
  write_str(2, "\": ");
  write_str(2, std::strerror(err));
  write_str(2, err == ENOENT ? " (is it on PATH, or give its full path)\n" : "\n");
  _exit(127);
}

struct ChildArgs {
  const ExecImage* image;
  int out_fd, err_fd;
  pid_t agent;
  const sigset_t* not_default;
};

int child_main(void* arg) {
  auto* a = static_cast<ChildArgs*>(arg);
  exec_child(*a->image, a->out_fd, a->err_fd, a->agent, *a->not_default);
}

// The signals whose disposition is not SIG_DFL now (one query each, once per
// group: the children then reset a few instead of all 64 each).
sigset_t not_default_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s = 1; s < NSIG; ++s) {
    struct sigaction old {};
    if (sigaction(s, nullptr, &old) == 0 && old.sa_handler != SIG_DFL) sigaddset(&set, s);
  }
  return set;
}

// The spawned child's stack: mapped, not allocated, so that only the pages
// the child touches (a few: execvpe's path search) become resident; a
// zero-filled vector made all 256 KiB resident in every launch.
class ChildStack {
 public:
  static constexpr size_t kSize = 256 * 1024;
  ChildStack()
      : base_(::mmap(nullptr, kSize, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0)) {
    if (base_ == MAP_FAILED) {
      throw Error(std::string("cannot map a stack to spawn workers: ") + std::strerror(errno));
    }
  }
  ~ChildStack() { ::munmap(base_, kSize); }
  ChildStack(const ChildStack&) = delete;
  ChildStack& operator=(const ChildStack&) = delete;
  void* top() const { return static_cast<char*>(base_) + kSize; }

 private:
  void* base_;
};

// Starts the worker's process as vfork does (CLONE_VM | CLONE_VFORK: no
// copy of the agent's page tables; the agent is suspended until the child
// execs or exits), on a stack of its own, as glibc's posix_spawn does. The
// child touches no memory of the agent but its stack and errno (the agent
// reads neither while suspended), and changes only its own signal
// dispositions and descriptors (neither CLONE_SIGHAND nor CLONE_FILES).
// Every signal must be blocked (see start()).
pid_t spawn_child(const ExecImage& image, int out_fd, int err_fd, pid_t agent,
                  const sigset_t& not_default, const ChildStack& stack) {
  ChildArgs args{&image, out_fd, err_fd, agent, &not_default};
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  // The sanitizers' runtimes follow fork(), not a clone that shares the
  // agent's memory: the child's instrumented code would write the agent's
  // shadow state (ThreadSanitizer then reports races that are not there).
  (void)stack;
  pid_t pid = ::fork();
  if (pid == 0) child_main(&args);
  return pid;
#else
  return ::clone(child_main, stack.top(), CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
#endif
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
    boost::system::error_code ec;
    w->rescan.cancel();
    w->pidfd.close(ec);  // its pending wait completes as aborted
    if (!w->reaped) {
      ::kill(-w->pid, SIGKILL);
      ::kill(w->pid, SIGKILL);
      int status;
      waitpid(w->pid, &status, 0);
      w->reaped = true;
      OrphanKiller::instance().untrack(w->pid);
    }
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
    if (!w->reaped) out.push_back(w->pid);
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
  for (const auto& w : workers_) out.push_back(w->reaped ? 0 : w->pid);
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
  pid_t agent = getpid();
  // The spawned child's stack (execvpe's path search uses it); reused: the
  // agent waits for each child to exec before the next spawn.
  ChildStack child_stack;
  // ccrun sets its dispositions at start-up (SIGPIPE ignored; the stop
  // signals are blocked and read from a signalfd), never while spawning.
  sigset_t not_default = not_default_signals();
  for (int i = 0; i < count; ++i) {
    const WorkerSpec spec = make(i);
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      throw Error(std::string("cannot create pipes for a worker: ") + std::strerror(errno));
    }
    int64_t spawned_ns = progress::monotonic_ns();
    pid_t pid = -1;
    if (starter) pid = start_with(starter, spec, out[1], err[1]);
    if (!starter) {
      ExecImage image(spec.argv, spec.env, spec.placement);
      sigset_t all, old_mask;
      sigfillset(&all);
      pthread_sigmask(SIG_SETMASK, &all, &old_mask);
      pid = spawn_child(image, out[1], err[1], agent, not_default, child_stack);
      pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    }
    if (pid < 0) {
      ::close(out[0]), ::close(out[1]), ::close(err[0]), ::close(err[1]);
      throw Error(std::string("cannot start worker ") + std::to_string(spec.rank) + ": clone: " +
                  std::strerror(errno));
    }
    setpgid(pid, pid);  // also here: no race with the first kill(-pgid)
    OrphanKiller::instance().track(pid);
    ::close(out[1]);
    ::close(err[1]);
    int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (pidfd < 0) {
      throw Error(std::string("pidfd_open failed (Linux 5.3 or later is needed): ") +
                  std::strerror(errno));
    }
    auto w = std::make_shared<Worker>(io_, pidfd);
    w->token = spec.token;
    w->pid = pid;
    w->spawned_ns = spawned_ns;
    w->exit.local_rank = spec.local_rank;
    w->exit.rank = spec.rank;
    w->exit.pid = pid;
    logs_.add(out[0], spec.out, [this, w] { --w->open_pipes; maybe_finish(w); });
    w->err_stream = logs_.add(err[0], spec.err, [this, w] { --w->open_pipes; maybe_finish(w); });
    workers_.push_back(w);
    ++running_;
    w->pidfd.async_wait(asio::posix::stream_descriptor::wait_read,
                        [this, w](boost::system::error_code ec) {
                          if (!ec) on_pidfd(w);
                        });
  }
}

void WorkerGroup::on_pidfd(const std::shared_ptr<Worker>& w) {
  int status = 0;
  pid_t r;
  do {
    r = waitpid(w->pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r != w->pid) return;
  w->reaped = true;
  w->exit.time = std::chrono::system_clock::now();
  if (WIFSIGNALED(status)) {
    w->exit.signal = WTERMSIG(status);
    w->exit.exit_code = 128 + w->exit.signal;
  } else {
    w->exit.exit_code = WEXITSTATUS(status);
  }
  --running_;
  // The worker's group may hold children that keep its pipes open: they die
  // with it.
  bool left_in_group = ::kill(-w->pid, SIGKILL) == 0;
  // So may its descendants that left the group (setsid): they are in the
  // agent's tree (it is their subreaper), found there by the worker's token.
  int escaped = kill_holders(w->token, false, w->pid);
  if (left_in_group || escaped > 0) {
    spdlog::info("ccrun: rank {} (pid {}) exited and left processes running (background jobs "
                 "it started{}); they were killed with it",
                 w->exit.rank, w->pid,
                 escaped > 0 ? fmt::format(", {} of them outside its process group", escaped) : "");
  }
  OrphanKiller::instance().untrack(w->pid);
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
    kill_holders(w->token, false);
    rescan_holders(w, std::min(after * 2, std::chrono::milliseconds(2000)));
  });
}

void WorkerGroup::maybe_finish(const std::shared_ptr<Worker>& w) {
  if (!w->reaped || w->open_pipes > 0 || w->reported) return;
  w->reported = true;
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
    if (w->reaped) continue;
    ::kill(-w->pid, sig);
    // A stopped process (SIGSTOP, Ctrl-Z) acts on a signal only once it
    // runs: SIGCONT lets a stopped rank stop within --stop-grace like the
    // others. (SIGKILL needs none; to a running process it is nothing.)
    if (sig != SIGKILL) ::kill(-w->pid, SIGCONT);
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
  signal_all(sig);
  kill_timer_ = std::make_unique<asio::steady_timer>(io_, grace);
  kill_timer_->async_wait([this, grace, sig](boost::system::error_code ec) {
    if (ec) return;
    std::vector<std::string> left;
    for (const auto& w : workers_) {
      if (!w->reaped) left.push_back(fmt::format("rank {} (pid {})", w->exit.rank, w->pid));
    }
    if (!left.empty()) {
      spdlog::warn("ccrun: {} still running {:.1f}s after {} (--stop-grace); killing with SIGKILL",
                   fmt::join(left, ", "), std::chrono::duration<double>(grace).count(), signal_name(sig));
    }
    signal_all(SIGKILL);
  });
}

}  // namespace ccrun::agent
