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
//   env += watch.environment(local_rank, pythonpath);
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

#include "hang_verdict.h"

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

  // What worker `local_rank` adds to its environment: CCRUN_PROGRESS_FILE,
  // CCRUN_STACK_FILE and PYTHONPATH (the hook's folder before `pythonpath`,
  // the worker's own value, when the hook is installed).
  std::vector<std::string> environment(int local_rank, const std::string& pythonpath) const;

  // The workers' pids, by local rank (0: not running).
  void set_pids(const std::vector<pid_t>& pids);

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

 private:
  struct Worker;
  std::vector<std::unique_ptr<Worker>> workers_;
  int first_rank_, node_rank_;
  std::string host_;
};

}  // namespace ccrun::agent
