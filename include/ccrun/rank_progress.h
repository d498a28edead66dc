//===- ccrun/rank_progress.h - One rank's progress, as its agent publishes it -*- C++ -*-//
//
// What an agent samples from each of its workers' progress records
// (ccrun/progress.h) and publishes with every heartbeat in its node's status
// (ccrun/job_state.h's NodeStatus): node 0's agent judges hangs from every
// node's ranks (docs/hangs.md), `ccrun status` shows them. Each record has
// one JSON form, read tolerantly (a field missing or of another type reads
// as its default), since agents of other versions write them:
//
//   RankView v;
//   v.rank = 3, v.steps = 120;
//   nlohmann::json j = v.to_json();           // {"rank": 3, "steps": 120, ...}
//   RankView back = RankView::from_json(j);   // back.steps == 120
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "ccrun/progress.h"

namespace ccrun {

// One process group as one rank's record shows it (JSON within RankView's
// "groups": {id, size, issued, completed, op, op_code, count, waiting_ms,
// op_calls: {op name: calls, for the ops it issued; absent when not counted}}).
struct GroupView {
  uint64_t id = 0;          // same on every member (0: the world group)
  uint32_t size = 0;        // members
  uint64_t issued = 0;      // last call issued (sequence number)
  uint64_t completed = 0;   // last call completed
  uint32_t op = 0;          // progress::Op of the last call issued
  uint64_t count = 0;       // its elements
  int64_t waiting_ms = -1;  // since the unfinished call was issued; -1: none
  // Calls issued of each op (progress::Record::op_calls, [op - 1]); all 0
  // when the slot has no counts (past the 16th slot, a DDP slot, an older writer).
  std::array<uint32_t, progress::kCountedOps> op_calls{};
};

// One worker's start-up in one attempt (JSON {rank, spawned_ms, warm,
// after_spawn_s: {interpreter, imports, group, collective, step}}, seconds,
// phases not reached left out). ccrun/startup_timeline.h reads and prints it.
struct StartupTimeline {
  int rank = -1;
  int64_t spawned_ms = 0;  // wall clock (ms since the epoch) when it was spawned; 0 = unknown
  // Microseconds from the spawn to each progress::Phase; -1 = not reached.
  std::array<int64_t, progress::kPhases> after_spawn_us{-1, -1, -1, -1, -1};
  bool warm = false;  // forked from a warm template

  bool reached(progress::Phase p) const { return after_spawn_us[size_t(p)] >= 0; }
  // Took its first step.
  bool done() const { return reached(progress::Phase::kStep); }
  // The last phase reached (microseconds after the spawn), 0 when none.
  int64_t last_us() const;

  nlohmann::json to_json() const;
  static StartupTimeline from_json(const nlohmann::json& j);  // tolerant
};

// One rank, as its agent sampled it (JSON {rank, local_rank, node_rank,
// host, pid, reporting, idle_ms, steps, steps_per_s, busy_ms_per_step,
// rss_kb, state, groups, startup}).
struct RankView {
  int rank = -1, local_rank = -1, node_rank = -1;
  std::string host;
  int pid = 0;
  bool reporting = false;  // its record (or its file's mtime) ever moved
  int64_t idle_ms = 0;     // since its last progress of any kind
  uint64_t steps = 0;      // steps marked (step(), or touches of the file)
  double steps_per_s = 0;  // over the last window
  double busy_ms_per_step = -1;  // time outside collectives per step; -1: unknown
  int64_t rss_kb = 0;      // resident memory, last sample
  // Its process's state letter in /proc/<pid>/stat at the last sample: 'T'
  // stopped (SIGSTOP), 't' stopped by a tracer, 'D' in uninterruptible sleep
  // (a disk, a network file system, a driver); 0 when unknown.
  char state = 0;
  // Its process groups past the record's slots (progress::kMaxGroups): their calls are not
  // seen, so the rank may progress in them while its record stands still.
  uint32_t groups_unrecorded = 0;
  std::vector<GroupView> groups;
  StartupTimeline startup;  // this attempt's start-up so far

  nlohmann::json to_json() const;
  static RankView from_json(const nlohmann::json& j);  // tolerant
};

// A set of ranks as ccrun prints one: sorted, runs compressed, "0-62,64-127"
// ("" for none). Every message that names several ranks uses it.
std::string compress_ranks(std::vector<int> ranks);

}  // namespace ccrun
