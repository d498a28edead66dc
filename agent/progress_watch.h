//===- progress_watch.h - The agent's view of its workers' progress -*- C++ -*-//
//
// One ProgressWatch per attempt: it creates each worker's progress record
// (ccrun/progress.h) under /dev/shm, maps it at the first sample, and names it in the worker's
// environment, with the Python start-up hook (agent/python) on PYTHONPATH so
// torch workers report without a code change. sample() reads every record
// straight from the shared page, plus one /proc/<pid>/statm read (RSS) and
// one fstat (a `touch` from a shell script) per worker: a few microseconds,
// so the agent can sample every second at no measurable CPU.
//
//   ProgressWatch watch(token, attempt, first_rank, node_rank, host, nproc);
//   watch.add_environment(local_rank, env);
//   ... spawn ...
//   watch.set_pids(group.pids());
//   std::vector<RankView> now = watch.sample();
//
//===----------------------------------------------------------------------===//
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "env_builder.h"
#include "ccrun/hang_verdict.h"
#include "ccrun/startup_timeline.h"

namespace ccrun::agent {

class ProgressWatch {
 public:
  // Records for `nproc` local workers. Throws Error when /dev/shm (or
  // $CCRUN_PROGRESS_DIR) cannot hold them.
  ProgressWatch(const std::string& token, int attempt, int first_rank, int node_rank,
                std::string host, int nproc);
  ~ProgressWatch();  // unmaps and removes the files
  ProgressWatch(const ProgressWatch&) = delete;  // owns mappings and files
  ProgressWatch& operator=(const ProgressWatch&) = delete;

  // Adds worker `local_rank`'s CCRUN_PROGRESS_FILE and CCRUN_STACK_FILE to
  // `env`, and the hook's folder before its PYTHONPATH (add_hook_path).
  void add_environment(int local_rank, EnvBuilder& env) const;

  // The Python start-up hook's folder first on PYTHONPATH, when installed,
  // then the folder of its C wrappers (python_extension_dir).
  static void add_hook_path(EnvBuilder& env);

  // The workers' pids, by local rank (0: not running), and when each was
  // spawned (CLOCK_MONOTONIC ns; empty or 0: unknown).
  void set_pids(const std::vector<pid_t>& pids, const std::vector<int64_t>& spawned_ns = {});

  // The installed packages worker `local_rank` had imported at its first
  // step (the Python hook's list; empty when none was written).
  std::vector<std::string> imported_modules(int local_rank) const;

  // Every worker's start-up timeline now (startup_timeline.h): its record's
  // start-up block only, no system call.
  std::vector<StartupTimeline> timelines() const;

  // Every worker's view now; rates over the time since the previous call.
  std::vector<RankView> sample();

  // The signal that makes worker `local_rank` dump its Python tracebacks
  // (set by the hook; 0: none), and the file they go to.
  int dump_signal(int local_rank) const;
  pid_t dump_pid(int local_rank) const;  // the process that registered it
  const std::string& stack_file(int local_rank) const;

  // Worker `local_rank`'s pid and RSS at the last sample.
  pid_t pid(int local_rank) const;
  int64_t last_rss_kb(int local_rank) const;

  // The folder of the Python start-up hook, or "" when not installed.
  static std::string python_hook_dir();

  // The folder of the hook's C wrappers (the _ccrun_hook module) that goes
  // with the hook in `hook`: the build tree's for the source tree's hook, the
  // installed one (under lib/, being built for one architecture) for the
  // installed hook; "" for any other hook folder (CCRUN_PYTHON_HOOK_DIR), or
  // when they are not built. Without them the hook uses its Python wrappers.
  static std::string python_extension_dir(const std::string& hook);

 private:
  struct Worker;
  std::vector<std::unique_ptr<Worker>> workers_;
  int first_rank_, node_rank_;
  std::string host_;
};

}  // namespace ccrun::agent
