//===- preflight.h - A node's input checked before its agent starts -*- C++ -*-//
//
// Some of a job's input can only be checked on the node that runs it: the
// token file CCRUN_STORE_TOKEN_FILE names, the --log-dir, the GPUs that
// --numa-binding binds near. The agent would find a mistake in them only
// once it runs, and end the job as failed (exit 1); checked here first, it is
// a usage error (exit 2) that names the cause and the fix, as a bad flag is.
//
//   check_node_inputs(cmd.spec, Environment::from_process());  // throws ConfigError
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ccrun/job_spec.h"
#include "job_builder.h"

namespace ccrun::launcher {

// Throws ConfigError naming the setting and the fix when CCRUN_STORE_TOKEN_FILE
// (set in `env`) cannot be read as a token file (token_file.h), --log-dir is
// not a directory this process can create and write to (it is created), or
// --numa-binding has no plan for one of this node's local ranks (no GPU
// for it). Reads the topology only when --numa-binding is given.
void check_node_inputs(const JobSpec& spec, const Environment& env);

}  // namespace ccrun::launcher
