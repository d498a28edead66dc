//===- attempt.h - One attempt's state, built and dropped whole -*- C++ -*-===//
//
// Everything that belongs to one attempt of the agent (one rendezvous
// round's workers on this node): the worker processes and their output, the
// store calls made while they run, the hang monitor and the start-up watch,
// the round's event, this node's failures, whether it stops, and how the
// attempt ended. The agent builds one when an attempt starts and drops it
// when the next one starts (or the job ends): nothing of an attempt is reset
// by hand, so nothing of it can leak into the next, and what the job's end
// reads of the last attempt (its failures, its hang, whether it had reached
// the exit barrier) is still there.
//
//   attempt_ = std::make_unique<Attempt>(io_, ++generation_, std::make_unique<LogMux>(io_));
//   attempt_->workers = parts_.workers(io_, *attempt_->output, token);
//   ... a handler made for attempt `gen` acts only while gen == generation_ ...
//   attempt_->finish(AttemptOutcome::kFailedHere);  // the first outcome stands
//
//===----------------------------------------------------------------------===//
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "ccrun/rendezvous.h"
#include "ccrun/console_collapse.h"
#include "hang_monitor.h"
#include "log_mux.h"
#include "mpi/pmi_server.h"
#include "startup_watch.h"
#include "store_tasks.h"
#include "terminal_lease.h"
#include "worker_group.h"

namespace ccrun::agent {

// How an attempt ended for this node.
enum class AttemptOutcome {
  kSucceeded,   // every node's workers exited 0 (the exit barrier passed)
  kFailedHere,  // a worker of this node failed, or could not start, or hung
  kRoundEnded,  // another node ended the round (its failure, a node lost, a close)
  kSignalled,   // a stop signal here
};

// A rank's MPI_Abort (PMI abort), as its failure reports it.
struct MpiAbort {
  int exit_code = 1;
  std::string message;
};

struct Attempt {
  // `output` carries the attempt's worker output; `workers` writes into it.
  Attempt(boost::asio::io_context& io, int generation, std::unique_ptr<LogMux> output)
      : generation(generation), output(std::move(output)), tasks(io) {}
  Attempt(const Attempt&) = delete;  // handlers hold its parts
  Attempt& operator=(const Attempt&) = delete;

  // Its number among the agent's attempts: a handler of an attempt that
  // ended finds another number and does nothing.
  const int generation;

  // The outcome; the first one stands.
  void finish(AttemptOutcome o) {
    if (!outcome) outcome = o;
  }

  // Declared in the order they are built; destroyed the other way round
  // (the workers before the output they write into).
  std::unique_ptr<LogMux> output;                  // the workers' output, to console and files
  std::shared_ptr<FilteredLog> filtered[2];        // --duplicate-*-filters: stdout, stderr
  std::shared_ptr<LineSink> collapse[2];           // --collapse-output: stdout, stderr
  StoreTasks tasks;                                // store calls made while workers run
  std::unique_ptr<HangMonitor> monitor;            // the ranks' progress (--hang-timeout)
  std::unique_ptr<Workers> workers;                // the processes
  std::unique_ptr<mpi::PmiServer> pmi;             // --mpi: the workers' PMI-1 server
  std::unique_ptr<TerminalLease> terminal;         // the terminal, lent to a lone worker
  std::unique_ptr<StartupWatch> startup;           // until every local rank's first step

  std::optional<AttemptOutcome> outcome;
  std::optional<rendezvous::RoundEvent> event;  // how the round ended, as the watcher said
  std::vector<Failure> local_failures;          // this node's, in order
  std::map<int, MpiAbort> mpi_aborts;           // --mpi: by local rank, ranks that called MPI_Abort
  nlohmann::json hang;                          // the hang verdict and its stacks, if any
  bool stopping = false;                        // the workers are being stopped
  bool status_published = false;                // its ranks written to the store once
  bool reached_barrier = false;                 // every local worker exited 0
  int exited_ok = 0;                            // local workers that exited 0
};

}  // namespace ccrun::agent
