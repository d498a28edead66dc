//===- fanout.h - One agent per host of a host list, over ssh ----*- C++ -*-===//
//
// `ccrun --hostfile hosts.txt ... train.py` run anywhere starts one ccrun
// agent per host through the ssh command, called as ssh is:
//
//   ssh -o BatchMode=yes node2 "cd '/work/job' && export PYTHONPATH='...' &&
//       exec '/opt/ccrun/bin/ccrun' '--nnodes' '3' '--node-rank' '1'
//       '--master-addr' 'node1' ... '--exit-on-stdin-eof' '--no-python' '--'
//       '/usr/bin/python3' '-u' 'train.py'"
//
// Node ranks follow host order; the master is the first host unless
// --master-addr is given. Every line of every node reaches this console
// prefixed "host: " (with --collapse-output, the workers' lines instead go
// through one collapse across all nodes, which prefixes their ranks: a line
// that ranks of several nodes print is printed once); SIGINT/SIGTERM are forwarded to every ssh; ssh exiting
// 255 (host unreachable, refused, ...) stops the job at once, naming the
// host and ssh's message, unless the job is elastic and at least min nodes
// remain. The exit status is the first non-zero status of a node (255 for
// an unreachable host), or 128+N when ccrun itself was stopped by signal N.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ccrun/job_spec.h"
#include "job_builder.h"

namespace ccrun::launcher {

// `text` single-quoted for a POSIX shell ('it'\''s').
std::string shell_quote(std::string_view text);

// Splits a command such as `ssh -o "ProxyJump=a b"` into words, with POSIX
// shell quoting ('...', "...", backslash). Throws ConfigError labelled
// `label` on an unclosed quote or an empty command.
std::vector<std::string> split_words(std::string_view text, const std::string& label);

// The flags of host `index`'s agent: nnodes, its node rank and its number
// of workers, then every setting marked forwarded in the settings table
// (settings.cpp) that is not empty, --exit-on-stdin-eof, and the program
// after --.
std::vector<std::string> agent_args(const JobSpec& spec, size_t index);

// The variables forwarded to every host: the default set (PYTHONPATH,
// PYTHON_EXEC, VIRTUAL_ENV, CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS,
// CCRUN_LOG_LEVEL, CCRUN_STORE_TOKEN_FILE, and every NCCL_*, TORCH_*, UCX_*)
// where set here, the job's exports (each must be set here), and the job's
// env: entries. Throws ConfigError for an export that is not set.
std::map<std::string, std::string> forwarded_env(const JobSpec& spec, const Environment& env);

// The one shell command line host `index` runs: cd to `cwd`, export `vars`
// (plus CUDA_VISIBLE_DEVICES when --include/--exclude narrowed its slots),
// exec `ccrun` with agent_args().
std::string remote_command(const JobSpec& spec, size_t index, const std::string& cwd,
                           const std::map<std::string, std::string>& vars, const std::string& ccrun);

// Runs the job on every host of spec.hosts and returns the exit status
// (see above). Blocks until every ssh has exited.
int run_fanout(const JobSpec& spec, const Environment& env);

}  // namespace ccrun::launcher
