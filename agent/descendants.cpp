// Finding a worker's descendants: the agent's own process tree while it
// lives, every process's environment once it died (see descendants.h).
#include "descendants.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace ccrun::agent {
namespace {

// True when /proc/<pid>/environ holds `needle` ("NAME=value") as a whole
// entry. Reads in fixed chunks: environments can be large.
bool environ_holds(long pid, const char* needle, size_t needle_len, bool with_children) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%ld/environ", pid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  static char buf[64 * 1024];
  // An entry may straddle two chunks: keep the tail of the previous one.
  size_t keep = 0;
  bool found = false;
  for (;;) {
    ssize_t n = ::read(fd, buf + keep, sizeof buf - keep);
    if (n <= 0) break;
    size_t len = keep + size_t(n);
    size_t start = 0;
    for (size_t i = 0; i < len; ++i) {
      if (buf[i] != '\0') continue;
      size_t len = i - start;
      bool match = len == needle_len ||
                   (with_children && len > needle_len && buf[start + needle_len] == '.');
      if (match && std::memcmp(buf + start, needle, needle_len) == 0) {
        found = true;
        break;
      }
      start = i + 1;
    }
    if (found) break;
    keep = len - start;
    if (keep == sizeof buf) keep = 0;  // an entry longer than the buffer: not ours
    std::memmove(buf, buf + start, keep);
  }
  ::close(fd);
  return found;
}

// "CCRUN_AGENT_TOKEN=<token>" into `out`; its length, or 0 when it does not fit.
size_t make_needle(const char* token, char* out, size_t size) {
  if (token[0] == '\0') return 0;
  int len = std::snprintf(out, size, "%s=%s", kAgentTokenVar, token);
  return len <= 0 || size_t(len) >= size ? 0 : size_t(len);
}

// Appends the children of every thread of `pid` (a child's parent is the
// thread that forked it, or any thread of a subreaper it reparented to).
void append_children(pid_t pid, std::vector<pid_t>& out) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/task", int(pid));
  DIR* tasks = opendir(path);
  if (!tasks) return;
  while (dirent* e = readdir(tasks)) {
    if (e->d_name[0] == '.') continue;
    char children[96];
    std::snprintf(children, sizeof children, "/proc/%d/task/%.16s/children", int(pid), e->d_name);
    int fd = ::open(children, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[4096];
    long value = 0;
    bool in_number = false;
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] >= '0' && buf[i] <= '9') {
          value = value * 10 + (buf[i] - '0');
          in_number = true;
        } else if (in_number) {
          out.push_back(pid_t(value));
          value = 0;
          in_number = false;
        }
      }
    }
    if (in_number) out.push_back(pid_t(value));
    ::close(fd);
  }
  closedir(tasks);
}

// Reads /proc/<pid>/<name> into `buf` (NUL-terminated, at most `size` - 1
// bytes: the first read holds these small files whole); false when the
// process is gone.
bool read_proc_file(pid_t pid, const char* name, char* buf, size_t size) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/%s", int(pid), name);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = ::read(fd, buf, size - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  return true;
}

// State letter, process group and kernel flags of `pid` from
// /proc/<pid>/stat; false when it is gone.
bool read_stat(pid_t pid, char& state, pid_t& pgrp, unsigned* flags = nullptr) {
  char buf[512];
  if (!read_proc_file(pid, "stat", buf, sizeof buf)) return false;
  // "pid (comm) S ppid pgrp session tty tpgid flags ...": comm may hold
  // spaces and parentheses.
  const char* close_paren = std::strrchr(buf, ')');
  int ppid = 0, group = 0, session = 0, tty = 0, tpgid = 0;
  unsigned f = 0;
  if (!close_paren || std::sscanf(close_paren + 1, " %c %d %d %d %d %d %u", &state, &ppid, &group,
                                  &session, &tty, &tpgid, &f) != 7) {
    return false;
  }
  pgrp = group;
  if (flags) *flags = f;
  return true;
}

// True when `pid` has SIGKILL pending (/proc/<pid>/status, its own or its
// thread group's pending set): an earlier walk, or the SIGKILL of its
// process group, killed it and it has not run to its end yet (a loaded
// machine may leave it unscheduled for a while). Such a process is killed
// again but not counted again.
bool kill_pending(pid_t pid) {
  char buf[4096];
  if (!read_proc_file(pid, "status", buf, sizeof buf)) return false;
  const unsigned long long bit = 1ull << (SIGKILL - 1);
  for (const char* field : {"\nSigPnd:", "\nShdPnd:"}) {
    const char* at = std::strstr(buf, field);
    if (at && (std::strtoull(at + std::strlen(field), nullptr, 16) & bit)) return true;
  }
  return false;
}

// The kernel's PF_EXITING flag (the sched.h of its sources): the process is in
// exit(2) already, past the point of running any more of its own code.
constexpr unsigned kExiting = 0x4;

void stop_and_kill(pid_t pid) {
  // Stopped first: a stopped process cannot fork another while the rest of
  // the walk runs; SIGKILL works on stopped processes.
  ::kill(pid, SIGSTOP);
  ::kill(pid, SIGKILL);
}

}  // namespace

bool become_subreaper() { return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0; }

int kill_tree_holders(const char* token, bool with_children, const pid_t* skip, size_t n_skip,
                      pid_t signalled_group) {
  char needle[256];
  size_t len = make_needle(token, needle, sizeof needle);
  if (len == 0) return 0;
  const pid_t self = getpid();
  const pid_t own_group = getpgrp();
  auto skipped = [&](pid_t p) { return std::find(skip, skip + n_skip, p) != skip + n_skip; };
  std::vector<pid_t> killed, roots, kids;
  std::vector<std::pair<pid_t, bool>> todo;  // pid, below a token holder
  int counted = 0;
  for (int round = 0; round < 8; ++round) {
    roots.clear();
    append_children(self, roots);
    todo.clear();
    for (pid_t c : roots) {
      if (skipped(c)) continue;
      char state = 0;
      pid_t group = 0;
      if (!read_stat(c, state, group)) continue;
      if (state == 'Z') {
        // A reparented descendant that died: ours to reap. The agent's own
        // helpers (hang evidence tools) stay in its group and are waited
        // for by the code that started them.
        if (group != own_group) ::waitpid(c, nullptr, WNOHANG);
        continue;
      }
      todo.emplace_back(c, false);
    }
    size_t before = killed.size();
    while (!todo.empty()) {
      auto [p, doomed] = todo.back();
      todo.pop_back();
      bool was_killed = std::find(killed.begin(), killed.end(), p) != killed.end();
      doomed = doomed || was_killed || environ_holds(p, needle, len, with_children);
      if (doomed && !was_killed) {
        // Counted unless it was killed before (by an earlier walk or with
        // the group just SIGKILLed), or died on its own meanwhile (then its
        // group cannot be read).
        char state = 0;
        pid_t group = 0;
        bool counts = !kill_pending(p) &&
                      (signalled_group <= 0 ||
                       (read_stat(p, state, group) && state != 'Z' && group != signalled_group));
        stop_and_kill(p);
        killed.push_back(p);
        if (counts) ++counted;
      }
      kids.clear();
      append_children(p, kids);
      for (pid_t k : kids) todo.emplace_back(k, doomed);
    }
    // A process with SIGKILL pending forks no more (the kernel cancels a
    // fork in progress), so a walk that found nothing new is the last.
    if (killed.size() == before) break;
  }
  return counted;
}

int kill_process_group(pid_t group) {
  std::vector<pid_t> todo, kids;
  append_children(getpid(), todo);
  int running = 0;
  while (!todo.empty()) {
    pid_t p = todo.back();
    todo.pop_back();
    char state = 0;
    pid_t pgrp = 0;
    unsigned flags = 0;
    if (!read_stat(p, state, pgrp, &flags)) continue;
    if (pgrp == group && state != 'Z' && state != 'X' && !(flags & kExiting) && !kill_pending(p)) {
      ++running;
    }
    kids.clear();
    append_children(p, kids);
    todo.insert(todo.end(), kids.begin(), kids.end());
  }
  ::kill(-group, SIGKILL);
  return running;
}

int kill_token_holders(const char* token, bool with_children) {
  static char needle[256];
  size_t len = make_needle(token, needle, sizeof needle);
  if (len == 0) return 0;
  pid_t self = getpid();
  int killed = 0;
  for (int round = 0; round < 8; ++round) {
    DIR* proc = opendir("/proc");
    if (!proc) return killed;
    int found = 0;
    while (dirent* e = readdir(proc)) {
      char* end = nullptr;
      long pid = std::strtol(e->d_name, &end, 10);
      if (*end != '\0' || pid <= 0 || pid == self) continue;
      if (!environ_holds(pid, needle, len, with_children)) continue;
      stop_and_kill(pid_t(pid));
      ++found;
    }
    closedir(proc);
    killed += found;
    if (found == 0) break;
  }
  return killed;
}

}  // namespace ccrun::agent
