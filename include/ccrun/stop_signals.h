//===- ccrun/stop_signals.h - Stop signals, held from the first instruction -*- C++ -*-//
//
// A user's Ctrl-C or a scheduler's SIGTERM may come at any moment, also while
// ccrun or ccrun-rendezvous is still loading (an ASan build needs 0.3 s to
// reach main). Left to the default action, such a signal kills the process
// with no message and no summary. So both binaries block the stop signals
// before any of their own code runs, from the ELF .preinit_array (earlier
// than any library's constructor and than main), and every thread started
// later inherits the mask. A blocked signal stays pending: the event loop
// reads it (signalfd, sigwait) as soon as it runs, whenever it came.
//
//   CCRUN_BLOCK_STOP_SIGNALS_AT_LOAD();   // at namespace scope in a *_main.cpp
//   ...
//   ccrun::release_stop_signals();        // paths with no event loop (--help, status)
//
// Children must not inherit the mask: every fork in ccrun resets it before
// exec (worker_group.cpp, fanout.cpp, orphan_killer.cpp).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <signal.h>

namespace ccrun {

// The signals held at load: torchrun's default --signals-to-handle. A
// binary unblocks those it does not handle once it knows (release_*).
inline sigset_t load_time_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set, s);
  return set;
}

// For .preinit_array: runs before anything else of the process.
inline void block_stop_signals_at_load(int, char**, char**) {
  sigset_t set = load_time_stop_signals();
  sigprocmask(SIG_BLOCK, &set, nullptr);
}

// Unblocks the load-time signals that are not in `handled`: a pending one
// takes its default action now, as if it had never been held. Call it from
// the main thread before starting threads of your own.
inline void release_stop_signals_except(const sigset_t& handled) {
  sigset_t release = load_time_stop_signals();
  for (int s = 1; s < NSIG; ++s) {
    if (sigismember(&handled, s) == 1) sigdelset(&release, s);
  }
  sigprocmask(SIG_UNBLOCK, &release, nullptr);
}

// Unblocks every load-time signal (a path with no event loop).
inline void release_stop_signals() {
  sigset_t none;
  sigemptyset(&none);
  release_stop_signals_except(none);
}

}  // namespace ccrun

// Puts block_stop_signals_at_load into the executable's .preinit_array. Use
// once per executable, in the file that defines main (a static library's
// object holding it might not be linked in).
#define CCRUN_BLOCK_STOP_SIGNALS_AT_LOAD()                                       \
  [[gnu::used, gnu::section(".preinit_array")]] static void (*                      \
      ccrun_block_stop_signals_at_load_entry)(int, char**, char**) =               \
      &::ccrun::block_stop_signals_at_load
