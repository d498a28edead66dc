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

#include <string>

#include "ccrun/job_spec.h"

namespace ccrun::agent {

// Starts each line of the failure report of an agent that a ccrun's ssh
// fan-out started (JobSpec::started_by_fanout), so that the launching ccrun
// shows the report of one node only: every node prints the same one.
inline constexpr const char* kReportMarker = "ccrun-report| ";

// Starts the line on which such an agent tells the launching ccrun that its
// node was excluded (ccrun/exclusion.h): the marker, then the Exclusion's
// JSON. The launcher keeps it for the next launch of the job and does not
// show the line.
inline constexpr const char* kExclusionMarker = "ccrun-exclusion| ";

// Runs the job on this node until it succeeds, fails for good or is
// signalled. Returns the exit status for ccrun: 0 when every worker on every
// node exited 0, 1 when the job failed, 128+N when stopped by signal N.
// Blocks; installs its own signal handling for spec.signals_to_handle.
[[nodiscard]] int run(const JobSpec& spec);

// When ccrun itself runs with TORCHELASTIC_ERROR_FILE set (TorchX, a nested
// launcher), writes ccrun's own error there in torch's record format, as
// torchrun's main (decorated with @record) does for its own exceptions:
// {"message": {"message": "<type>: <what>", "extraInfo": {"py_callstack",
// "timestamp"}}}. For errors that end ccrun before or beside its workers (a
// bad flag, a rendezvous that timed out, a lost store, a signal); a failed
// worker's record is written by run() instead. Does nothing when unset.
void write_launcher_error(const std::string& type, const std::string& what);

}  // namespace ccrun::agent
