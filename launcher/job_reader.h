//===- job_reader.h - Reaching a running job's store, for status and top -*- C++ -*-===//
//
// `ccrun status` and `ccrun top` read a job the same way: the same flags
// name its store (--rdzv-endpoint, --rdzv-id, --rdzv-backend, --rdzv-conf,
// --timeout), the same store is opened from them, and the same records
// (ccrun/job_state.h's JobState with its RankViews) are read and described.
// This file is that one way, so that the two commands cannot drift apart.
//
//   JobStoreArgs a;
//   add_job_store_options(app, a);          // then app.parse(...)
//   auto store = open_store_of_job(a, "status");
//   JobState job = read_job_state(*store, a.run_id);
//
//===----------------------------------------------------------------------===//
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "ccrun/job_state.h"
#include "ccrun/rendezvous_backend.h"
#include "ccrun/store.h"
#include "completion.h"

namespace ccrun::launcher {

// The flags naming a job and its store, as the user gave them.
struct JobStoreArgs {
  std::string endpoint;  // --rdzv-endpoint: HOST:PORT, etcd members, or a store address
  std::string run_id;    // --rdzv-id
  double timeout_s = 2;  // --timeout: seconds for the store to answer
  std::string backend_text{rendezvous::backend_name(rendezvous::Backend::kC10d)};  // --rdzv-backend
  std::string conf_text;  // --rdzv-conf
};

// Adds the flags of JobStoreArgs to `app`, bound to `a` (--rdzv-endpoint and
// --rdzv-id required).
void add_job_store_options(CLI::App& app, JobStoreArgs& a);

// `app`'s flags for the completion script, with --rdzv-backend's names.
std::vector<FlagCompletion> job_store_flag_completions(const CLI::App& app);

// Opens the store `a` names, printing --rdzv-conf's warnings as
// "ccrun <command>: warning: ...". Throws ConfigError for a bad flag value
// (a usage error), ccrun::Error when the store cannot be reached.
[[nodiscard]] std::shared_ptr<store::Store> open_store_of_job(const JobStoreArgs& a,
                                                           const char* command);

// Every rank of the job, as its nodes last published them, in node order.
std::vector<RankView> job_rank_views(const JobState& job);

// A failure in one line: "node 0 rank 2: exit code 1 at 2026-... UTC (attempt 0)";
// a rank stopped as a hang's culprit says "hung" (its exit is ccrun's stop).
std::string describe_failure(const Failure& f);

// The line for a store that does not know the job, with its fix.
std::string no_such_job_message(const JobStoreArgs& a);

}  // namespace ccrun::launcher
