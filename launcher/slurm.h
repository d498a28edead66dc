//===- slurm.h - Slurm's srun variables as ccrun settings --------*- C++ -*-===//
//
// Under `srun` with one task per node, Slurm tells each task everything the
// node flags would: ccrun reads
//
//   nnodes       SLURM_STEP_NUM_NODES, else SLURM_JOB_NUM_NODES, else SLURM_NNODES
//   node_rank    SLURM_NODEID
//   master_addr  the first host of SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST,
//                else SLURM_NODELIST (Slurm's hostlist syntax, expanded here)
//   rdzv_id      SLURM_JOB_ID
//
// only inside a job step (SLURM_STEP_ID set, as srun does; a batch script
// itself is not a step). Flags and PET_ variables win over these, and these
// over the job file (see docs/cli.md).
//
//   expand_hostlist("gpu[01-02,07],cpu3", "SLURM_JOB_NODELIST")
//     -> {"gpu01", "gpu02", "gpu07", "cpu3"}
//
//===----------------------------------------------------------------------===//
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "job_builder.h"
#include "settings.h"

namespace ccrun::launcher {

// Expands a Slurm hostlist: comma-separated names, each with any number of
// bracketed ranges (`n[1-3,5]`, `rack[1-2]-n[01-04]`, `10.0.0.[1-2]`); a
// range keeps its zero padding (`[08-10]` -> 08, 09, 10); the leftmost
// bracket varies slowest. Throws ConfigError "<label> "<text>": column N:
// ..." on bad input.
std::vector<std::string> expand_hostlist(std::string_view text, const std::string& label);

// The settings Slurm gives this process (keys as in settings()), each
// labelled with its variable; empty outside a job step. Throws ConfigError
// when srun started more than one task on this node.
std::map<std::string, Raw> slurm_settings(const Environment& env);

}  // namespace ccrun::launcher
