//===- hang_evidence.h - Stacks of hung ranks, and OOM kills named -*- C++ -*-===//
//
// What the agent gathers about its workers when a verdict needs evidence:
//   - every rank's stacks: the native stacks of every thread (eu-stack, from
//     Debian's elfutils), and for Python workers every thread's traceback,
//     which the start-up hook makes faulthandler write to CCRUN_STACK_FILE
//     on the dump signal it registered (no change to the script);
//   - whether the kernel's OOM killer ended a worker: the kernel log
//     (/dev/kmsg names the pid it killed), else the worker's memory cgroup
//     counter (v2 memory.events or v1 memory.oom_control, "oom_kill").
// These calls block (a process to trace, a file to wait for): the agent runs
// them off its event loop.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "env_builder.h"

namespace ccrun::agent {

struct StackTarget {
  int rank = -1;
  pid_t pid = 0;
  int dump_signal = 0;     // >0: `dump_pid` dumps Python tracebacks on it
  pid_t dump_pid = 0;      // the process that registered it (the worker or its child)
  std::string stack_file;  // where they go
};

struct RankStacks {
  int rank = -1;
  pid_t pid = 0;
  std::string python;  // every thread's traceback ("" when not a Python worker)
  std::string native;  // every thread's native frames, or why there are none
  std::string nccl_trace;  // torch's NCCL flight recorder dump, when one came
};

// Python tracebacks first (all ranks signalled at once, each read once its
// file stops growing, at most `python_wait`), then every rank's native
// stacks at once (each trace bounded to 10 s).
std::vector<RankStacks> collect_stacks(const std::vector<StackTarget>& targets,
                                       std::chrono::milliseconds python_wait =
                                           std::chrono::milliseconds(3000));

// torch's NCCL flight recorder (ProcessGroupNCCL keeps its last collectives
// and dumps them when its FIFO `<pipe stem><rank>.pipe` is written). The
// variables that turn it on, its FIFOs and dumps named `<prefix>nccl_...`
// (a folder and "/", or a path and a file-name prefix), set in `env` unless
// the user set them (or their torch 2.x names).
void add_flight_recorder_env(const std::string& prefix, EnvBuilder& env);

// Asks the flight recorders of `ranks` whose pipes exist under `prefix` to
// dump, and waits (at most `wait`) for the dumps: rank -> dump file, for
// each that came. The bound is the native stacks' (10 s): torch 2.x writes
// its C++ stacks into the dump, symbolized, which took 4.5 to over 5 s on
// an H100 with torch 2.11.
std::vector<std::pair<int, std::string>> dump_flight_recorders(
    const std::string& prefix, const std::vector<int>& ranks,
    std::chrono::milliseconds wait = std::chrono::milliseconds(10000));

// The memory cgroup OOM-kill counter of `pid`'s cgroup (v2 or v1), or -1
// when unreadable. Read it while the worker runs (its cgroup is gone from
// /proc once it is reaped).
int64_t cgroup_oom_kills(pid_t pid);
std::string cgroup_of(pid_t pid);          // its memory cgroup's folder, or ""
int64_t cgroup_oom_kills_at(const std::string& cgroup_dir);

// Why `pid`, killed by SIGKILL, died, if the OOM killer did it: a sentence
// naming the evidence ("the kernel's OOM killer ended it (kernel log: ...)"),
// or "" when nothing says so. `cgroup_dir` and `kills_before` from the
// worker's start (-1: unknown).
std::string oom_kill_evidence(pid_t pid, const std::string& cgroup_dir, int64_t kills_before);

}  // namespace ccrun::agent
