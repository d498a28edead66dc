//===- orphan_killer.h - Kills the workers' processes if the agent dies -*- C++ -*-//
//
// PR_SET_PDEATHSIG kills a worker when the agent dies, but not the
// processes the worker started itself (a shell's children, a data loader's
// processes). The orphan killer is a small process forked once per agent: the
// agent tells it, through a pipe, each worker process group it starts and
// each it has reaped; when the pipe reaches EOF (the agent is gone, however
// it died) the orphan killer SIGKILLs every group still listed, then, unless
// the agent disarmed it after a clean stop, every process that carries the
// agent's token (descendants.h: those that left their worker's group with
// setsid or setpgid), removes the files the agent would have removed (its
// workers' progress records under /dev/shm, its temporary run directory:
// both named ccrun-<token>-...), then exits. Its process name stays "ccrun-janitor",
// the name ps has always shown for it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <sys/types.h>

#include <string>

namespace ccrun::agent {

// What every file or directory an agent leaves in a shared place starts
// with: its workers' progress records (progress_dir()) and its temporary run
// directory (under TMPDIR). The orphan killer of a dead agent removes what
// starts with it there.
std::string leftover_prefix(const std::string& agent_token);  // "ccrun-<token>-"
// Where the progress records are: $CCRUN_PROGRESS_DIR, else /dev/shm.
std::string progress_dir();

class OrphanKiller {
 public:
  // Forks the agent's orphan killer; call once, before any thread exists.
  // `agent_token` is the CCRUN_AGENT_TOKEN value of this agent's workers.
  static void start(const std::string& agent_token);
  // The agent's orphan killer (start() must have run).
  static OrphanKiller& instance();

  void track(pid_t pgid);    // a worker group now exists
  void untrack(pid_t pgid);  // it was reaped; forget it
  // Every worker was reaped and the agent's tree walk (descendants.h) killed
  // what they left: no token scan at EOF, unless a group is tracked again.
  // Spares every clean exit one read per process on the node.
  void disarm();
  // The orphan killer's pid (0 when it could not be started): a child of the
  // agent that its tree walk leaves out.
  pid_t pid() const { return pid_; }

 private:
  explicit OrphanKiller(const std::string& agent_token);
  void send(int32_t value);
  int pipe_fd_ = -1;
  pid_t pid_ = 0;
};

}  // namespace ccrun::agent
