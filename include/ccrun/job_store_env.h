//===- ccrun/job_store_env.h - The job's store, as a worker finds it -*- C++ -*-//
//
// ccrun's agent advertises its store to every worker it starts (the
// worker_env variables of ccrun/job_keys.h), so that ccrun's collectives
// library, and any program run under ccrun, joins the job's store instead
// of hosting a second one. This reads that advertisement in one place.
//
//   if (auto js = ccrun::worker_env::job_store()) {
//     auto tcp = store::open_store(store::tcp_address(js->endpoint), options);
//     auto mine = std::make_shared<store::PrefixStore>(js->collectives_prefix(), tcp);
//   }
//
//===----------------------------------------------------------------------===//
#pragma once

#include <optional>
#include <string>

#include "ccrun/endpoint.h"

namespace ccrun::worker_env {

struct JobStore {
  store::Endpoint endpoint;  // the agent's store
  std::string run_id;        // "none" where the agent gave none
  int attempt = 0;           // the restart count: each attempt has its own keys

  // Where this attempt's process groups keep their keys (JobKeys::collectives).
  std::string collectives_prefix() const;
};

// The store the agent advertises, or nullopt when the environment names none
// (a worker started by torchrun or by hand). Throws ccrun::ConfigError naming
// the variable, its value and what is wrong when one is set but malformed:
// a port that is not 0-65535, an attempt that is not a number.
[[nodiscard]] std::optional<JobStore> job_store();

}  // namespace ccrun::worker_env
