//===- worker_env.h - The environment each worker starts with ---*- C++ -*-===//
//
// torchrun's variables (so PyTorch scripts run unchanged), ccrun's own
// CCRUN_* variables for its collectives library, and the job's extra `env`.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ccrun/job_spec.h"
#include "ccrun/rendezvous.h"

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

// The whole environment of local rank `local_rank`, as "NAME=value".
std::vector<std::string> worker_environment(const EnvContext& ctx, int local_rank,
                                            const std::string& error_file);

// The network interface that carries `addr` ("lo" for 127.0.0.1), or "".
std::string interface_of(const std::string& addr);

// True when `host` names an address of this machine (or is loopback).
bool is_local_host(const std::string& host);

}  // namespace ccrun::agent
