//===- resolve.h - Raw settings into the JobSpec, one concern each -*- C++ -*-//
//
// parse_command_line (job_builder.cpp) reads flags and the job file, then
// hands a `Sources` to one resolver per concern: nodes, rendezvous,
// restarts, logs, program. Each converts and validates its settings and
// fills its part of the JobSpec; errors name the setting's source.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ccrun/job_spec.h"
#include "job_builder.h"
#include "settings.h"
#include "yaml_job.h"

namespace ccrun::launcher {

// Where each setting's value comes from: flag > PET_ variable > Slurm's
// srun variables (slurm.h) > YAML > default.
class Sources {
 public:
  // `flag(key)` returns the flag's text when the flag was given.
  using FlagLookup = std::function<std::optional<std::string>(const std::string& key)>;
  // Reads Slurm's variables from `env` (throws ConfigError on bad ones).
  Sources(FlagLookup flag, const Environment& env, const YamlJob& yaml);

  // The setting `key`'s raw value and source. `key` must be in settings().
  Raw get(const std::string& key) const;
  // Whether `key` was set by a flag, a PET_ variable or the job file.
  bool given(const std::string& key) const;
  const Environment& env() const { return env_; }
  // Whether this process is a task of a Slurm job step (slurm.h).
  bool under_slurm() const { return !slurm_.empty(); }
  const YamlJob& yaml() const { return yaml_; }

 private:
  FlagLookup flag_;
  const Environment& env_;
  const YamlJob& yaml_;
  std::map<std::string, Raw> slurm_;
};

// nnodes, nproc_per_node, node_rank, master_addr/port, local_addr, standalone.
void resolve_nodes(const Sources& src, JobSpec& spec);
// hostfile / hosts:, include, exclude into spec.hosts; with a host list,
// nnodes defaults to its length and master_addr to its first host. Needs
// resolve_nodes first (a host's slots default to nproc_per_node).
void resolve_hosts(const Sources& src, JobSpec& spec);
// Whether the rendezvous is dynamic (c10d, etcd, --standalone), from the
// raw settings: a host list may then hold more hosts than --nnodes' maximum
// (the others wait as hot spares).
bool dynamic_rendezvous(const Sources& src);
// A host list's hosts excluded by an earlier launch of the same job, whose
// cool-down has not ended (exclusion_file.h), are left out, each said; an
// error when too few hosts remain. Needs resolve_rendezvous first (the id).
void skip_excluded_hosts(const Sources& src, JobSpec& spec);
// nproc_per_node gpu without a CUDA device here and without a host list
// (whose hosts count their own): an error. Not called for --print-config,
// which prints `gpu` as written, for the machine that will run the file.
void check_workers_counted(const Sources& src, const JobSpec& spec);
// ssh_command (flag > PET_SSH_COMMAND > CCRUN_SSH > YAML > default),
// remote_ccrun, and the exports (the job file's, then `flag_exports`).
void resolve_fanout(const Sources& src, const std::vector<std::string>& flag_exports, JobSpec& spec);
// rdzv_backend, rdzv_endpoint, rdzv_id, rdzv_conf, and the checks that tie
// the rendezvous to the node settings. Needs resolve_nodes first.
void resolve_rendezvous(const Sources& src, JobSpec& spec);
// max_restarts, stop_without_progress, monitor_interval, stop_grace,
// signals_to_handle, role.
void resolve_restarts(const Sources& src, JobSpec& spec);
// log_dir, redirects, tee, local_ranks_filter (checked against
// nproc_per_node: needs resolve_nodes first), the duplicate filters and
// event_log_handler.
void resolve_logs(const Sources& src, JobSpec& spec);
// numa_binding and virtual_local_rank: where each worker runs and which
// GPU it sees.
void resolve_placement(const Sources& src, JobSpec& spec);
// warm_start and preload (module names, checked).
void resolve_warm_start(const Sources& src, JobSpec& spec);
// The worker's argv from the remaining command line (or the job file's
// program/args), module, no_python, run_path; and env:. Returns false when
// no program was given.
bool resolve_program(const Sources& src, std::vector<std::string> rest, JobSpec& spec);

// Whether `program` is a Python script by its name (".py"): it runs under
// the interpreter unless --no-python.
inline bool is_python_script(const std::string& program) {
  return program.size() > 3 && program.compare(program.size() - 3, 3, ".py") == 0;
}

// The interpreter a .py program, -m and --run-path run under without
// PYTHON_EXEC, and the flags resolve_program gives it.
inline constexpr const char* kDefaultPython = "python3";
inline constexpr const char* kPythonFlags = "-u";
// The -c code --run-path runs: the program's path, then its arguments.
inline constexpr const char* kRunPathCode =
    "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')";

}  // namespace ccrun::launcher
