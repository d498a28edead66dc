//===- run_command.h - A short helper command, bounded in time ---*- C++ -*-===//
//
// The agent runs a few commands of its own and waits for them: eu-stack for
// a rank's native stacks, a user's --health-check. Each gets its stdout and
// stderr in one pipe, the default signal dispositions and no blocked
// signals (the agent holds its stop signals), its own process group, and is
// killed (the whole group) once `timeout` passes. Blocking: callers run it
// off the agent's loop.
//
//   CommandResult r = run_command({"sh", "-c", check}, std::chrono::seconds(5));
//   if (r.timed_out) ...; else if (r.exit_code != 0) ... r.output ...
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace ccrun::agent {

struct CommandResult {
  std::string output;       // stdout and stderr, at most max_bytes
  int spawn_error = 0;      // errno of a program that could not start (then nothing ran)
  bool timed_out = false;   // killed at the timeout
  int exit_code = -1;       // when it exited
  int signal = 0;           // when a signal ended it
};

CommandResult run_command(const std::vector<std::string>& args, std::chrono::milliseconds timeout,
                          size_t max_bytes = 1 << 20);

}  // namespace ccrun::agent
