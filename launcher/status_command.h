//===- status_command.h - `ccrun status` --------------------------*- C++ -*-===//
//
// `ccrun status --rdzv-endpoint HOST:PORT --rdzv-id ID [--json]` reads a
// job's state from its store, and only reads: the job's state (forming,
// running, restarting, finished, failed, stopped), its round and attempt,
// each node (host, address, node rank, its ranks, seconds since its last
// heartbeat) and the last failure. Exit status: 0 while the job is healthy
// or finished, 1 when it failed or was stopped, 2 for a bad command line,
// 3 when the store is unreachable or does not know the job.
//
// `status` is a subcommand only as ccrun's first argument: a program named
// `status` still runs after `--` or after any flag.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

#include "completion.h"

namespace ccrun::launcher {

// `ccrun status`'s flags, for the completion script.
std::vector<FlagCompletion> status_flag_completions();

// `args`: what follows "status" on the command line. Returns the exit status.
int run_status_command(const std::vector<std::string>& args);

}  // namespace ccrun::launcher
