//===- proc_stat.h - A process's state and memory from /proc ----*- C++ -*-===//
//
// One read of /proc/<pid>/stat gives what the agent samples of a worker at
// each progress read: its state letter (a stopped rank, 'T', or one in
// uninterruptible sleep, 'D', explains a hang by itself) and its resident
// memory. One file, not stat and statm: the sample runs every interval.
//
//   ProcStat s = read_proc_stat(pid);   // s.state == 'T' after SIGSTOP
//
//===----------------------------------------------------------------------===//
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace ccrun::agent {

struct ProcStat {
  char state = 0;      // 'R', 'S', 'D', 'T', 't', 'Z', ...; 0: unreadable (gone)
  int64_t rss_kb = 0;  // resident memory
};

ProcStat read_proc_stat(pid_t pid);

}  // namespace ccrun::agent
