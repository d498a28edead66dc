//===- top_command.h - `ccrun top`: a running job, live -*- C++ -*-===//
//
// `ccrun top --rdzv-endpoint HOST:PORT --rdzv-id ID [--once] [--interval S]`
// shows a running job in the terminal, redrawn every second: one row per
// rank (or per class of ranks in the same state when the terminal is
// shorter than the job) with its node and host, step, steps per second, the
// collective it waits in and for how long, its lag against the median step,
// its RSS, the straggler mark and its start-up phase; a hang verdict and its
// culprit in reverse video. It reads the job's store exactly as `ccrun
// status` does (job_reader.h), once per refresh, so it works from any machine
// that reaches the store, and changes nothing.
//
// Keys: q (or Ctrl-C) quits, s cycles the sort (rank, step, lag). The
// terminal is restored on every way out. --once, or output that is not a
// terminal, prints one plain frame and exits. Exit status: 0 after q or
// --once, 2 for a bad command line (or no terminal to read keys from), 3
// when the store cannot be reached, stopped answering, or has no such job,
// 128+N after a signal N other than SIGINT.
//
// Like `status`, `top` is a subcommand only as ccrun's first argument.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

#include "completion.h"

namespace ccrun::launcher {

// `ccrun top`'s flags, for the completion script.
std::vector<FlagCompletion> top_flag_completions();

// `args`: what follows "top" on the command line. Returns the exit status.
// Expects the load-time stop signals still blocked (ccrun/stop_signals.h):
// the live view reads them, with SIGWINCH, from a signalfd.
int run_top_command(const std::vector<std::string>& args);

}  // namespace ccrun::launcher
