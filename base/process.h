//===- process.h - Starting and watching a child process, one way -*- C++ -*-===//
//
// Both of ccrun's supervisors start their children here: the agent its
// workers (agent/worker_group.h) and the launcher one ssh per host
// (launcher/fanout.h). A child gets a process group of its own (a signal
// the supervisor forwards reaches what it started too, and the terminal's
// Ctrl-C reaches only the supervisor), dies with its parent (PDEATHSIG, and
// a check that the parent did not die before it was set), starts with
// default signal dispositions and an empty mask, and holds only its three
// standard descriptors (and a control socket at 3, when asked). Its exit comes back through a pidfd on the
// supervisor's io_context: no SIGCHLD handler, no polling.
//
//   ProcessImage image(argv, &env);                // before the spawn: no allocation after
//   Spawner spawner;
//   SpawnOptions o;
//   o.stdout_fd = out, o.stderr_fd = err;
//   pid_t pid = spawner.spawn(image, o);
//   ProcessWatch watch(io, pid);
//   watch.async_wait([](ExitStatus s) { ... });    // reaped
//
//===----------------------------------------------------------------------===//
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ccrun {

// A child's argv and environment as the exec call takes them, built before
// the spawn (the child allocates nothing). The strings stay the caller's:
// they must outlive the spawn.
struct ProcessImage {
  // `env` null: the child inherits this process's environment.
  ProcessImage(const std::vector<std::string>& argv, const std::vector<std::string>* env);
  std::vector<char*> argv, envp;  // null-terminated; envp empty = inherit
};

struct SpawnOptions {
  int stdin_fd = -1;   // -1: /dev/null
  int stdout_fd = 1;
  int stderr_fd = 2;
  int death_signal = SIGKILL;  // what the child gets when its parent dies
  // A fourth descriptor the child keeps, as its descriptor 3 (the warm
  // template's control socket); -1: none, the child holds only 0, 1 and 2.
  int control_fd = -1;
  // Runs in the child just before exec (the agent's CPU and memory
  // binding); must not allocate. May _exit(127) after saying why on fd 2.
  void (*before_exec)(const void* arg) = nullptr;
  const void* before_exec_arg = nullptr;
};

// Starts children as above, one at a time. Holds what every spawn of a
// batch shares: the child's stack, mapped rather than allocated so that
// only the pages the child touches (a few: execvpe's path search) become
// resident, and the signals whose disposition here is not SIG_DFL (read
// once; each child resets those, and exec resets handlers but keeps
// SIG_IGN). Make one after this process has set its dispositions.
class Spawner {
 public:
  // Throws ccrun::Error when the stack cannot be mapped.
  Spawner();
  ~Spawner();
  Spawner(const Spawner&) = delete;
  Spawner& operator=(const Spawner&) = delete;

  // Starts `image` (argv[0] searched in PATH); returns its pid, or -1 with
  // errno when the kernel refuses. Returns once the child has exec'd or
  // exited (CLONE_VFORK: no copy of this process's page tables, as glibc's
  // posix_spawn). A failed exec says so on the child's stderr, naming the
  // program and the cause, and exits 127. Every signal is blocked in the
  // calling thread meanwhile: no handler of this process may run in the
  // child, which shares its memory.
  pid_t spawn(const ProcessImage& image, const SpawnOptions& options);

 private:
  void* stack_;
  sigset_t not_default_;
};

// Opens /dev/null on each of descriptors 0, 1 and 2 that is closed, so that
// no descriptor this process opens later lands there and is taken for a
// standard stream (workers inherit stdin: docs/cli.md). Call first in main.
void open_standard_descriptors();

// How a child ended.
struct ExitStatus {
  int exit_code = 0;  // its exit code, or 128+N when signal N killed it
  int signal = 0;     // the signal that killed it, 0 when it exited
  static ExitStatus from_wait_status(int status);
};

// Sends `sig` to the process group of `pid` (spawn_process made it its
// leader), and SIGCONT after it unless it is SIGKILL: a stopped process
// (SIGSTOP, Ctrl-Z) acts on a signal only once it runs.
void signal_process_group(pid_t pid, int sig);

// A child's exit, as an event of `io`: its pidfd becomes readable when it
// exits, then the child is reaped (waitpid names its pid, so a zombie that
// reparented to the caller is never taken for it).
class ProcessWatch {
 public:
  // Throws ccrun::Error when the kernel has no pidfd (before Linux 5.3).
  ProcessWatch(boost::asio::io_context& io, pid_t pid);
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  pid_t pid() const { return pid_; }
  bool reaped() const { return reaped_; }

  // `on_exit` runs on the io_context once the child was reaped; never after
  // close() or the watch's end.
  void async_wait(std::function<void(ExitStatus)> on_exit);

  // Stops watching. The child, if it still runs, is the caller's to kill
  // and reap (kill_and_reap).
  void close();

  // SIGKILL to its group and to it, then reaps it (the supervisor's last
  // word, in destructors).
  void kill_and_reap();

 private:
  pid_t pid_;
  bool reaped_ = false;
  boost::asio::posix::stream_descriptor pidfd_;
};

}  // namespace ccrun
