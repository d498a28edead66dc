//===- startup_timeline.h - When each worker reached each start-up phase -*- C++ -*-===//
//
// What a PyTorch user waits for is not the launcher but the first training
// step, from launch and again after every failure. Each worker's progress
// record carries when it reached each phase of its start-up (interpreter,
// torch imported, process group formed, first collective, first step:
// ccrun/progress.h's Startup); the agent adds when it spawned the worker.
// This file turns those into one rank's timeline and into the one line the
// agent prints once every rank of an attempt took its first step:
//
//   attempt 1: every rank at its first step 0.14 s after rank 1 failed
//     (stop 0.01, start 0.002, imports 0 (warm), process group 0.05,
//      first step 0.08; slowest rank 3)
//
// Pure functions: tests drive them with made-up timelines (docs/startup.md).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ccrun/progress.h"
#include "ccrun/rank_progress.h"

namespace ccrun::agent {

// The record itself is ccrun/rank_progress.h's: every node's status carries it.
using ccrun::StartupTimeline;

// A phase's name as the timeline prints it ("process group").
const char* phase_name(progress::Phase p);

// The timeline of a worker spawned at `spawned_mono_ns` (CLOCK_MONOTONIC)
// from its record's start-up block; `mono_to_wall_ns` converts monotonic to
// wall-clock nanoseconds (the difference of the two clocks, read together).
StartupTimeline read_timeline(int rank, int64_t spawned_mono_ns, const progress::Startup& s,
                              int64_t mono_to_wall_ns);

// What the attempt's start is measured from: the agent's launch, or the
// failure that ended the previous attempt.
struct StartupReference {
  int64_t wall_ms = 0;  // 0: each rank's spawn
  std::string what;     // "launch", "rank 1 failed"
};

// The one line for an attempt whose every rank in `ranks` took its first
// step, or is past its start-up without one (past_startup: then the line
// says so, and ends at the last phase reached) (the slowest rank's phases,
// each from the phase before it reached;
// "stop" is from the reference to the spawn). Empty when `ranks` is empty.
std::string startup_line(int attempt, const StartupReference& ref,
                         const std::vector<StartupTimeline>& ranks);

// Whether a rank is past its start-up, having made `steps` steps: it took
// its first step; or, a program without steps, it completed a collective
// and progressed since (its steps moved); or it reports no start-up phase
// at all (no hook: a C++ or shell program runs from its spawn on).
bool past_startup(const StartupTimeline& t, uint64_t steps);

// One rank's start-up in a few words, for `ccrun status` and `top`: "first
// step 0.16s (warm)" after its spawn, "starting: imports 1.20s" (the last
// phase it reached) while it starts, "running since first collective 3.67s"
// or "running" once past a start-up without a first step (past_startup),
// or "-" when nothing is known.
std::string startup_summary(const StartupTimeline& t, uint64_t steps = 0);

// Seconds from `ref` to the last rank's first step; -1 when unknown.
double seconds_to_first_step(const StartupReference& ref, const std::vector<StartupTimeline>& ranks);

}  // namespace ccrun::agent
