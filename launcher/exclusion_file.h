//===- exclusion_file.h - A host-list job's exclusions on the launching host -*- C++ -*-//
//
// The agents of a host-list launch keep their exclusions (ccrun/exclusion.h)
// in the job's store, which ends with the job unless a ccrun-rendezvous
// daemon or etcd holds it. So that the next launch of the same job skips a
// bad host too, the launching ccrun also keeps each exclusion an agent
// reports (the line marked agent::kExclusionMarker) in a file of its own:
//
//   $CCRUN_STATE_DIR, else $XDG_STATE_HOME/ccrun, else ~/.local/state/ccrun
//     exclusions/<rdzv_id>.json      ExclusionList JSON, by host-list name
//
// and a launch leaves out the hosts whose cool-down has not ended, saying
// so (resolve_hosts.cpp). Deleting the file forgets them. Under Slurm there
// is no launching ccrun (srun starts each node's agent): each agent keeps
// its own node's exclusions in the same file (JobSpec::exclusion_file; the
// state folder is usually in a home folder every node shares) and sits its
// cool-down out when the job is requeued or launched again.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <filesystem>
#include <string>

#include "ccrun/exclusion.h"
#include "job_builder.h"

namespace ccrun::launcher {

// The file of job `run_id`'s exclusions; empty when no folder can be named
// (no HOME either).
std::filesystem::path exclusion_file(const Environment& env, const std::string& run_id);

}  // namespace ccrun::launcher
