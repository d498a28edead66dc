// The orphan killer process (see orphan_killer.h). Protocol on the pipe: int32
// values, a positive one tracks that process group, a negative one forgets
// -value, 0 disarms the token scan until the next positive one. At EOF it
// also removes the files a dead agent left (remove_leftovers).
#include "orphan_killer.h"

#include "descendants.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <dirent.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

namespace ccrun::agent {
namespace {

constexpr int kMaxGroups = 65536;

// Removes `dir_fd`'s entries whose names start with `prefix` ("" = every
// entry), directories with what they hold (`depth` levels at most). The
// agent's own files only: the prefix carries its random token.
void remove_prefixed(int dir_fd, const char* prefix, int depth) {
  DIR* d = fdopendir(dup(dir_fd));
  if (!d) return;
  size_t n = std::strlen(prefix);
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    if (std::strncmp(e->d_name, prefix, n) != 0) continue;
    if (unlinkat(dir_fd, e->d_name, 0) == 0 || errno != EISDIR || depth == 0) continue;
    int sub = openat(dir_fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) continue;
    remove_prefixed(sub, "", depth - 1);
    close(sub);
    unlinkat(dir_fd, e->d_name, AT_REMOVEDIR);
  }
  closedir(d);
}

// What a SIGKILLed agent leaves: its workers' progress records (and their
// stack and module lists) and its temporary run directory, each named
// ccrun-<token>-... (progress_watch.h, run_logs.h).
void remove_leftovers(const char* progress_dir, const char* temp_dir, const char* prefix) {
  for (const char* dir : {progress_dir, temp_dir}) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    remove_prefixed(fd, prefix, 3);
    close(fd);
  }
}

[[noreturn]] void orphan_killer_main(int fd, const char* token, const char* progress_dir,
                                     const char* temp_dir, const char* prefix) {
  prctl(PR_SET_NAME, "ccrun-janitor");  // the name ps has always shown
  // Its own process group: a signal to the agent's group leaves it alive
  // to clean up.
  setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s = 1; s < NSIG; ++s) signal(s, SIG_IGN);
  // Holding the agent's stdout would keep its readers waiting for EOF.
  int devnull = open("/dev/null", O_RDWR);
  if (devnull >= 0) {
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(devnull, 2);
    if (devnull > 2 && devnull != fd) close(devnull);
  }
  // No allocation here: the orphan killer may be forked from a threaded agent.
  static pid_t groups[kMaxGroups];
  int count = 0;
  bool armed = true;  // scan for the token at EOF
  int32_t v;
  for (;;) {
    ssize_t n = ::read(fd, &v, sizeof v);
    if (n == sizeof v) {
      if (v == 0) {
        armed = false;
      } else if (v > 0 && count < kMaxGroups) {
        armed = true;
        groups[count++] = v;
      } else if (v < 0) {
        for (int i = 0; i < count; ++i) {
          if (groups[i] == -v) {
            groups[i] = groups[--count];
            break;
          }
        }
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EOF: the agent is gone
  }
  for (int i = 0; i < count; ++i) kill(-groups[i], SIGKILL);
  if (armed) kill_token_holders(token, true);
  if (*token) remove_leftovers(progress_dir, temp_dir, prefix);
  _exit(0);
}

OrphanKiller* g_orphan_killer = nullptr;

}  // namespace

std::string leftover_prefix(const std::string& agent_token) { return "ccrun-" + agent_token + "-"; }

std::string progress_dir() {
  const char* dir = std::getenv("CCRUN_PROGRESS_DIR");
  return dir && *dir ? dir : "/dev/shm";
}

void OrphanKiller::start(const std::string& agent_token) {
  if (!g_orphan_killer) g_orphan_killer = new OrphanKiller(agent_token);  // lives as long as the agent
}

OrphanKiller& OrphanKiller::instance() {
  if (!g_orphan_killer) start("");  // a program that runs no agent (tests): groups only
  return *g_orphan_killer;
}

OrphanKiller::OrphanKiller(const std::string& agent_token) {
  // Where the leftovers would be, worked out before the fork.
  std::string records = progress_dir();
  std::error_code ec;
  std::string temp_dir = std::filesystem::temp_directory_path(ec).string();
  std::string prefix = leftover_prefix(agent_token);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;
  pid_t pid = fork();
  if (pid == 0) {
    ::close(fds[1]);
    if (fds[0] != 3) dup2(fds[0], 3);
    syscall(SYS_close_range, 4u, ~0u, 0u);
    orphan_killer_main(3, agent_token.c_str(), records.c_str(), temp_dir.c_str(), prefix.c_str());
  }
  ::close(fds[0]);
  pipe_fd_ = pid > 0 ? fds[1] : -1;
  pid_ = pid > 0 ? pid : 0;
  if (pid < 0) ::close(fds[1]);
}

void OrphanKiller::send(int32_t value) {
  if (pipe_fd_ < 0) return;
  while (::write(pipe_fd_, &value, sizeof value) < 0 && errno == EINTR) {
  }
}

void OrphanKiller::track(pid_t pgid) { send(pgid); }
void OrphanKiller::untrack(pid_t pgid) { send(-pgid); }
void OrphanKiller::disarm() { send(0); }

}  // namespace ccrun::agent
