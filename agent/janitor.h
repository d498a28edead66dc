//===- janitor.h - Kills the workers' process groups if the agent dies -*- C++ -*-//
//
// PR_SET_PDEATHSIG kills a worker when the agent dies, but not the
// processes the worker started itself (a shell's children, a data loader's
// processes). The janitor is a small process forked once per agent: the
// agent tells it, through a pipe, each worker process group it starts and
// each it has reaped; when the pipe reaches EOF (the agent is gone, however
// it died) the janitor SIGKILLs every group still listed, then exits.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <sys/types.h>

namespace ccrun::agent {

class Janitor {
 public:
  // The agent's janitor, started on first use.
  static Janitor& instance();

  void track(pid_t pgid);    // a worker group now exists
  void untrack(pid_t pgid);  // it was reaped; forget it

 private:
  Janitor();
  void send(int32_t value);
  int pipe_fd_ = -1;
};

}  // namespace ccrun::agent
