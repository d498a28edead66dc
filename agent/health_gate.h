//===- health_gate.h - A node's checks before it joins a round ---*- C++ -*-===//
//
// A bad node should not take the job down twice. Before every round it
// joins (the first and each after a restart) the agent runs its health
// gate, each check bounded by --health-timeout:
//
//   disk     free space where the logs and the workers' temporary files go
//            (--log-dir, TMPDIR): at least 16 MiB (a disk about to be full;
//            a log disk that fills later is reported as it fills)
//   memory   MemAvailable of /proc/meminfo: at least 512 MiB
//   store    the job's store answers a ping; its round-trip time is said
//   clock    this host's wall clock against the store's host's (one TIME
//            round trip): at most 1 s apart, as nodes read each other's
//            times (heartbeat ages, exclusions' ends, events' order)
//   gpus, gpu_pages, gpu_ecc, gpu_memory
//            through NVML, on a GPU node (gpu_health.h)
//   allreduce
//            with --health-allreduce: ccrun-allreduce-check, a short
//            all_reduce among the node's ranks over loopback (a process per
//            rank, ccrun's collectives on Gloo): exit 0 is healthy
//   user     --health-check CMD (sh -c): exit 0 is healthy; any other exit,
//            or running past the bound (then it is killed), is not, and its
//            last output lines are the reason
//
// A check that cannot run (its program is missing: sh says 126 or 127)
// says so and does not count against the node. The result is an event
// (events.jsonl "health") and a line; an unhealthy node does not join: it
// leaves an elastic job to the others, and closes a static job, which
// cannot form without it, with the reason (docs/health.md).
//
//   HealthReport r = run_health_gate(options);
//   if (!r.healthy()) ... r.reason() ...
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ccrun/store.h"

namespace ccrun::agent {

struct HealthCheck {
  enum class Verdict { kOk, kFailed, kCannotRun };
  std::string name;
  Verdict verdict = Verdict::kOk;
  int64_t ms = 0;       // how long it took
  std::string detail;   // what it found, or why it failed
};

struct HealthReport {
  std::vector<HealthCheck> checks;
  bool healthy() const;
  // "disk: 12 MiB free in /tmp, under 256 MiB; user: exit 1: GPU 3 is missing"
  std::string reason() const;
  // One line of every check, for the console.
  std::string summary() const;
  nlohmann::json to_json() const;
};

struct HealthGateOptions {
  std::chrono::milliseconds bound{5000};  // each check's
  std::string user_check;                 // --health-check; "" = none
  // --health-allreduce: the ranks of the loopback all_reduce (0 = none) and
  // the program that runs it (find_allreduce_check(); "" = not found).
  int allreduce_ranks = 0;
  std::string allreduce_program;
  std::vector<std::string> dirs;          // where free space matters
  uint64_t min_free_bytes = 16ull << 20;
  uint64_t min_available_memory = 512ull << 20;
  // A round trip to the job's store (throws when it does not answer);
  // empty: no store check.
  std::function<void()> ping_store;
  // The store host's clock against this one's (nullopt: the store cannot
  // tell; throws when it does not answer); empty: no clock check.
  std::function<std::optional<store::ClockReading>()> read_store_clock;
  std::chrono::milliseconds max_clock_skew{1000};
  // The GPU checks (gpu_health.h), given the bound; empty: none.
  std::function<std::vector<HealthCheck>(std::chrono::milliseconds)> gpus;
};

// Runs every check (blocking, bounded). The pure verdicts below are its parts.
HealthReport run_health_gate(const HealthGateOptions& o);

// Free space `available` bytes in `dir` against `min`.
HealthCheck judge_free_space(const std::string& dir, uint64_t available, uint64_t min);
// /proc/meminfo's text against `min`: its MemAvailable line.
HealthCheck judge_memory(const std::string& meminfo, uint64_t min);
// A clock reading (nullopt: the store cannot tell its time) against
// `max_skew`: fails only when the skew is over it by more than the reading's
// uncertainty (half its round trip).
HealthCheck judge_clock(const std::optional<store::ClockReading>& reading,
                        std::chrono::milliseconds max_skew);
// The end of the check `name` that ran a command (the user's, the loopback
// all_reduce): exit code (-1 when a signal ended it), whether it was killed
// at the bound, its output.
HealthCheck judge_command(std::string name, int exit_code, bool timed_out,
                          std::chrono::milliseconds bound, const std::string& output);

// ccrun-allreduce-check's path: $CCRUN_ALLREDUCE_CHECK, else beside this
// program (installed: bin/), else the build tree's; "" when none exists.
std::string find_allreduce_check();

}  // namespace ccrun::agent
