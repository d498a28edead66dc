//===- progress_read.h - What a worker's progress record says ------*- C++ -*-//
//
// The agent's one reading of a progress record's group slots (ccrun/progress.h):
// each slot in use as a GroupView, and what the slots say together (the latest
// activity, the most calls, the DDP steps). A pure function of the record's
// bytes, so a unit test can drive it with a record it fills in.
//
//   GroupsRead read = read_groups(record, progress::now_ns(), view.groups);
//   uint64_t steps = record.steps + read.ddp_steps;  // step() marks, DDP steps
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <vector>

#include "ccrun/progress.h"
#include "ccrun/rank_progress.h"

namespace ccrun::agent {

// What a record's group slots say besides the slots (GroupView) themselves.
struct GroupsRead {
  int64_t last_ns = 0;      // the latest step, issue or completion seen
  uint64_t most_calls = 0;  // the most collectives one group completed
  uint64_t ddp_steps = 0;   // DDP steps issued, every DDP module's: the Python hook writes
                            // them in their slots only, not in the record's steps
  uint32_t wait_us = 0;     // sum of the slots' wait_us (wrapping)
  uint32_t unrecorded = 0;  // groups the record had no slot for (RankView::groups_unrecorded)
};

// Appends `r`'s group slots in use to `groups` (a slot being set up is
// skipped); `now` (CLOCK_MONOTONIC_COARSE ns) dates how long a pending call
// has waited. A DDP slot's step with no end of backward written is taken as
// completed once the module's next step is issued (see progress::Op::kDdpStep).
GroupsRead read_groups(const progress::Record& r, int64_t now, std::vector<GroupView>& groups);

}  // namespace ccrun::agent
