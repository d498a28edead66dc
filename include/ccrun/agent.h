//===- ccrun/agent.h - The per-node agent -----------------------*- C++ -*-===//
//
// The agent runs one node's part of a job: it hosts or joins the store,
// rendezvouses with the other nodes, spawns `nproc_per_node` workers,
// watches them, restarts the whole group on failure and reports root causes.
//
//   ccrun::JobSpec spec = ...;         // from the launcher
//   return ccrun::agent::run(spec);    // the process exit status
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ccrun/job_spec.h"

namespace ccrun::agent {

// Runs the job on this node until it succeeds, fails for good or is
// signalled. Returns the exit status for ccrun: 0 when every worker on every
// node exited 0, 1 when the job failed, 128+N when stopped by signal N.
// Blocks; installs its own signal handling for spec.signals_to_handle.
[[nodiscard]] int run(const JobSpec& spec);

}  // namespace ccrun::agent
