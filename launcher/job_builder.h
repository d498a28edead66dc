//===- job_builder.h - Flags, PET_* variables and YAML into a JobSpec -*- C++ -*-//
//
// ccrun's command line is torchrun's (both spellings of every flag), each
// flag may also come from PET_<FLAG> (as Kubeflow's PyTorchJob sets them)
// and from a YAML job file (--config). Precedence: flag > PET_ variable >
// YAML > default. Every value is validated once, whatever its source, and
// an error names its source: `--nnodes "3:2": min is larger than max` or
// `job.yaml:7: nnodes: "3:2": min is larger than max`.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ccrun/job_spec.h"

namespace ccrun::launcher {

// The environment the launcher reads (PET_*, PYTHON_EXEC, CUDA_VISIBLE_DEVICES).
struct Environment {
  std::map<std::string, std::string> vars;
  static Environment from_process();
  std::optional<std::string> get(const std::string& name) const;
};

struct Command {
  JobSpec spec;
  bool print_config = false;  // --print-config: print and exit 0
  std::string message;        // --help / --version text, when set: print, exit 0
};

// Parses argv (without argv[0]). Throws ccrun::ConfigError with a message
// naming the flag or YAML key, and the fix.
Command parse_command_line(const std::vector<std::string>& args, const Environment& env);

// The effective job as YAML, loadable again with --config.
std::string to_yaml(const JobSpec& spec);

}  // namespace ccrun::launcher
