// Finding a worker's descendants by their environment (see descendants.h).
#include "descendants.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ccrun::agent {
namespace {

// True when /proc/<pid>/environ holds `needle` ("NAME=value") as a whole
// entry. Reads in fixed chunks: environments can be large.
bool environ_holds(const char* pid, const char* needle, size_t needle_len, bool with_children) {
  char path[300];
  std::snprintf(path, sizeof path, "/proc/%s/environ", pid);
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

}  // namespace

int kill_token_holders(const char* token, bool with_children) {
  if (token[0] == '\0') return 0;
  static char needle[256];
  int len = std::snprintf(needle, sizeof needle, "%s=%s", kAgentTokenVar, token);
  if (len <= 0 || size_t(len) >= sizeof needle) return 0;
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
      if (!environ_holds(e->d_name, needle, size_t(len), with_children)) continue;
      // Stopped first: a stopped process cannot fork another while the
      // rest of the scan runs; SIGKILL works on stopped processes.
      ::kill(pid_t(pid), SIGSTOP);
      ::kill(pid_t(pid), SIGKILL);
      ++found;
    }
    closedir(proc);
    killed += found;
    if (found == 0) break;
  }
  return killed;
}

}  // namespace ccrun::agent
