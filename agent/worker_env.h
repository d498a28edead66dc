//===- worker_env.h - The environment each worker starts with ---*- C++ -*-===//
//
// torchrun's variables (so PyTorch scripts run unchanged), ccrun's own
// CCRUN_* variables for its collectives library, and the job's extra `env`;
// and the worker's arguments, with torchrun's ${local_rank} macro replaced.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ccrun/job_spec.h"
#include "ccrun/rendezvous.h"
#include "env_builder.h"

namespace ccrun::agent {

struct EnvContext {
  const JobSpec* spec = nullptr;
  const rendezvous::RendezvousInfo* info = nullptr;
  std::string run_id;
  int restart_count = 0;
  std::string store_host;  // the agent store, as workers reach it
  int store_port = 0;
  std::string gloo_ifname;  // interface towards the other nodes; "" = unknown
};

// What every worker of this node shares in every round: the agent's own
// environment, torchrun's defaults (OMP_NUM_THREADS, NCCL's async error
// handling) and the job's `env`. A warm template starts with it.
EnvBuilder node_environment(const JobSpec& spec);

// The whole environment of local rank `local_rank`: the node's, torchrun's
// per-rank and per-round variables, ccrun's CCRUN_* ones, then the job's `env`
// again (it overrides everything).
EnvBuilder worker_environment(const EnvContext& ctx, int local_rank, const std::string& error_file);

// --virtual-local-rank: the CUDA_VISIBLE_DEVICES of local rank `local_rank`,
// as torch 2.x sets it: the rank's entry of the agent's own list (trimmed),
// or the rank itself when the agent has none. Throws ccrun::Error when the
// list is shorter than the rank.
std::string virtual_visible_device(const std::optional<std::string>& agent_visible, int local_rank);

// torchrun's macros (Python's string.Template(text).safe_substitute(values)):
// "$name" and "${name}" with `name` in `values` are replaced and every other
// "$" is kept as written. One deliberate difference: "$$" stays "$$" (Python
// makes it "$"), so a shell's "$$" in `sh -c '...'` keeps its meaning; it
// still escapes, so "$${local_rank}" is not replaced (docs/cli.md).
std::string substitute_macros(const std::string& text,
                            const std::map<std::string, std::string, std::less<>>& values);

// The worker's argv: `entrypoint` with ${local_rank} (and $local_rank) in
// every argument after the program replaced by `local_rank` through
// substitute_macros, as torchrun's macros.substitute does it. The program
// itself is left alone, as torchrun leaves its entrypoint.
std::vector<std::string> worker_arguments(const std::vector<std::string>& entrypoint,
                                          int local_rank);

// The network interface that carries `addr` ("lo" for 127.0.0.1), or "".
std::string interface_of(const std::string& addr);

// True when `host` names an address of this machine (or is loopback).
bool is_local_host(const std::string& host);

}  // namespace ccrun::agent
