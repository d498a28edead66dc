// A process's state and memory from /proc (see proc_stat.h).
#include "proc_stat.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ccrun::agent {

// Its name, in parentheses, may hold spaces and ')': the fields are read
// after the last ')'.
ProcStat read_proc_stat(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return {};
  buf[n] = 0;
  const char* end = std::strrchr(buf, ')');
  if (!end) return {};
  ProcStat s;
  // After the name: the state (field 3), fields 4 to 23, then rss (24).
  const char* p = end + 1;
  auto field = [&p]() {
    while (*p == ' ') ++p;
    const char* start = p;
    while (*p && *p != ' ') ++p;
    return start;
  };
  s.state = *field();
  for (int i = 4; i < 24; ++i) field();
  s.rss_kb = std::strtoll(field(), nullptr, 10) * (sysconf(_SC_PAGESIZE) / 1024);
  return s;
}

}  // namespace ccrun::agent
