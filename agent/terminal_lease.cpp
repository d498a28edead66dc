// The terminal lent to a lone worker (see terminal_lease.h).
#include "terminal_lease.h"

#include <signal.h>
#include <unistd.h>

namespace ccrun::agent {

bool lends_terminal(bool owns_terminal, bool workers_read_stdin, int local_workers) {
  return owns_terminal && workers_read_stdin && local_workers == 1;
}

bool owns_terminal() { return ::isatty(0) == 1 && ::tcgetpgrp(0) == ::getpgrp(); }

TerminalLease::TerminalLease(pid_t group) { lent_ = ::tcsetpgrp(0, group) == 0; }

TerminalLease::~TerminalLease() {
  if (!lent_) return;
  // From the background, tcsetpgrp sends SIGTTOU unless it is blocked.
  sigset_t ttou, old;
  sigemptyset(&ttou);
  sigaddset(&ttou, SIGTTOU);
  pthread_sigmask(SIG_BLOCK, &ttou, &old);
  ::tcsetpgrp(0, ::getpgrp());
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace ccrun::agent
