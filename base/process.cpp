// Starting and watching a child process (see process.h).
#include "process.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ccrun/error.h"

extern char** environ;

namespace ccrun {
namespace {

constexpr size_t kStackSize = 256 * 1024;

void write_str(int fd, const char* s) {
  ssize_t r = ::write(fd, s, std::strlen(s));
  (void)r;
}

struct ChildArgs {
  const ProcessImage* image;
  const SpawnOptions* options;
  pid_t parent;
  const sigset_t* not_default;
};

// Runs in the child, every signal blocked (see Spawner::spawn).
[[noreturn]] void exec_child(const ChildArgs& a) {
  const SpawnOptions& o = *a.options;
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, o.death_signal);
  if (getppid() != a.parent) _exit(1);  // the parent died before PDEATHSIG was set
  for (int s = 1; s < NSIG; ++s) {
    if (sigismember(a.not_default, s) == 1) signal(s, SIG_DFL);
  }
  // The system call itself: a sanitizer's runtime (a sanitized build forks
  // here) keeps the mask its fork interceptor restored through the libc call.
  sigset_t none;
  sigemptyset(&none);
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, nullptr, size_t(_NSIG / 8));
  int in = o.stdin_fd >= 0 ? o.stdin_fd : open("/dev/null", O_RDONLY);
  if (in >= 0) dup2(in, 0);
  dup2(o.stdout_fd, 1);
  dup2(o.stderr_fd, 2);
  unsigned first_closed = 3;
  if (o.control_fd >= 0) {
    // dup2 onto itself keeps close-on-exec: clear it then.
    if (o.control_fd == 3) fcntl(3, F_SETFD, 0);
    else dup2(o.control_fd, 3);
    first_closed = 4;
  }
  syscall(SYS_close_range, first_closed, ~0u, 0u);
  if (o.before_exec) o.before_exec(o.before_exec_arg);
  char* const* envp = a.image->envp.empty() ? environ : a.image->envp.data();
  execvpe(a.image->argv[0], a.image->argv.data(), envp);
  int err = errno;
  write_str(2, "ccrun: cannot execute \"");
  write_str(2, a.image->argv[0]);
  write_str(2, "\": ");
  write_str(2, std::strerror(err));
  write_str(2, err == ENOENT ? " (is it on PATH, or give its full path)\n" : "\n");
  _exit(127);
}

int child_main(void* arg) { exec_child(*static_cast<ChildArgs*>(arg)); }

}  // namespace

ProcessImage::ProcessImage(const std::vector<std::string>& args,
                           const std::vector<std::string>* env) {
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  if (!env) return;
  for (const auto& e : *env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
}

Spawner::Spawner()
    : stack_(::mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0)) {
  if (stack_ == MAP_FAILED) {
    throw Error(std::string("cannot map a stack to start processes: ") + std::strerror(errno));
  }
  sigemptyset(&not_default_);
  for (int s = 1; s < NSIG; ++s) {
    struct sigaction old {};
    if (sigaction(s, nullptr, &old) == 0 && old.sa_handler != SIG_DFL) sigaddset(&not_default_, s);
  }
}

Spawner::~Spawner() { ::munmap(stack_, kStackSize); }

pid_t Spawner::spawn(const ProcessImage& image, const SpawnOptions& options) {
  ChildArgs args{&image, &options, getpid(), &not_default_};
  sigset_t all, old_mask;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old_mask);
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  // The sanitizers' runtimes follow fork(), not a clone that shares this
  // process's memory: the child's instrumented code would write the
  // parent's shadow state (ThreadSanitizer then reports races that are not
  // there).
  pid_t pid = ::fork();
  if (pid == 0) child_main(&args);
#else
  // The child touches no memory of ours but its stack and errno (we read
  // neither while suspended), and changes only its own signal dispositions
  // and descriptors (neither CLONE_SIGHAND nor CLONE_FILES).
  pid_t pid = ::clone(child_main, static_cast<char*>(stack_) + kStackSize,
                      CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
#endif
  int err = errno;
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (pid > 0) setpgid(pid, pid);  // also here: no race with a first kill(-pid)
  errno = err;
  return pid;
}

void open_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    int opened = open("/dev/null", O_RDWR);  // the lowest free descriptor: this one
    if (opened >= 0 && opened != fd) close(opened);
  }
}

ExitStatus ExitStatus::from_wait_status(int status) {
  ExitStatus s;
  if (WIFSIGNALED(status)) {
    s.signal = WTERMSIG(status);
    s.exit_code = 128 + s.signal;
  } else {
    s.exit_code = WEXITSTATUS(status);
  }
  return s;
}

void signal_process_group(pid_t pid, int sig) {
  ::kill(-pid, sig);
  if (sig != SIGKILL) ::kill(-pid, SIGCONT);
}

ProcessWatch::ProcessWatch(boost::asio::io_context& io, pid_t pid) : pid_(pid), pidfd_(io) {
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    throw Error(std::string("pidfd_open failed (Linux 5.3 or later is needed): ") +
                std::strerror(errno));
  }
  pidfd_.assign(fd);
}

void ProcessWatch::async_wait(std::function<void(ExitStatus)> on_exit) {
  pidfd_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                    [this, on_exit = std::move(on_exit)](boost::system::error_code ec) {
                      if (ec) return;
                      int status = 0;
                      pid_t r;
                      do {
                        r = waitpid(pid_, &status, WNOHANG);
                      } while (r < 0 && errno == EINTR);
                      if (r != pid_) return;
                      reaped_ = true;
                      on_exit(ExitStatus::from_wait_status(status));
                    });
}

void ProcessWatch::close() {
  boost::system::error_code ec;
  pidfd_.close(ec);  // a pending wait completes as aborted
}

void ProcessWatch::kill_and_reap() {
  close();
  if (reaped_) return;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  int status;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

}  // namespace ccrun
