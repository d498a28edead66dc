//===- terminal_lease.h - The terminal lent to a lone worker ----*- C++ -*-===//
//
// torchrun's workers share its process group and read its stdin, so
// `breakpoint()` in a one-worker job gives a pdb prompt at the terminal.
// ccrun's workers read ccrun's stdin too (worker_group.h), but each runs in a
// process group of its own, and a process outside the terminal's foreground
// group that reads it is stopped (SIGTTIN). So when ccrun is in the
// foreground of the terminal on its stdin and its node runs one worker, the
// agent lends that worker the terminal (tcsetpgrp) while it runs, and takes
// it back when it exits. Meanwhile the terminal's Ctrl-C reaches the worker,
// as it does under torchrun; a worker that dies of that SIGINT stops the job
// as a Ctrl-C to ccrun would (agent_attempt.cpp).
//
//   if (lends_terminal(...)) lease = std::make_unique<TerminalLease>(pid);
//   ...
//   lease.reset();  // the worker exited: the terminal is ccrun's again
//
//===----------------------------------------------------------------------===//
#pragma once

#include <sys/types.h>

namespace ccrun::agent {

// Whether a node's worker gets the terminal: this process holds the
// terminal (owns_terminal), the workers read this process's stdin, and
// there is one worker (two would fight over it).
bool lends_terminal(bool owns_terminal, bool workers_read_stdin, int local_workers);

// Whether this process can lend the terminal on its stdin: stdin is a
// terminal, and this process's group is its foreground group.
bool owns_terminal();

class TerminalLease {
 public:
  // Makes process group `group` the foreground group of the terminal on
  // descriptor 0 (nothing when that fails: lent() says so).
  explicit TerminalLease(pid_t group);
  // Takes the terminal back for this process's group.
  ~TerminalLease();
  TerminalLease(const TerminalLease&) = delete;  // one lease, one give-back
  TerminalLease& operator=(const TerminalLease&) = delete;

  bool lent() const { return lent_; }

 private:
  bool lent_ = false;
};

}  // namespace ccrun::agent
