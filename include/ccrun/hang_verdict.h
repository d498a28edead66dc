//===- hang_verdict.h - Is the job hung, and who holds it up ----*- C++ -*-===//
//
// The decision behind --hang-timeout, as a pure function of what every rank's
// progress record says (progress_watch.h samples them; across nodes the
// agents publish the same views with their heartbeats). docs/hangs.md tells
// users what the verdict means.
//
// A job is hung when, among the ranks that report progress at all:
//   1. none has progressed for `timeout` (no call issued or completed, no
//      step marked), or
//   2. ranks disagree for `timeout`: some have waited in call #N of a group
//      that another member of that group has not issued.
// The ranks behind are the culprits: in the group whose call has waited
// longest, the members that never issued the call the others wait in. When
// every member issued it (all wait inside one collective), nobody is behind
// in that group: the verdict says so and names them all. When no rank waits
// in a call (NCCL's calls return once queued: the others block in whatever
// waits for the GPU), the members of a group that issued fewer calls, or
// another call as their last, are the culprits.
// Ranks that report nothing (a program with no collectives, steps or hook)
// are never judged: no evidence, no verdict.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ccrun/rank_progress.h"

namespace ccrun::agent {

// The views themselves are ccrun/rank_progress.h's: every node's status carries them.
using ccrun::GroupView;
using ccrun::RankView;

// The verdict. `culprits` are ranks; `lines` the report, one line each.
struct HangVerdict {
  bool hung = false;
  std::string headline;           // one line: who, what, how long
  std::vector<int> culprits;      // the ranks behind (may be all the ranks in one call)
  // False when the records name no rank or call that holds the job up (every
  // rank idle with nothing to tell them apart, or every member waiting in
  // the same call): then what else is known (torch's NCCL flight recorder)
  // belongs in the verdict.
  bool cause_named = true;
  std::vector<std::string> lines; // one per reporting rank: where it is, for how long
  // The ranks merged into classes, one line each: the ranks in the same
  // place ("ranks 0-62,64-127 (127): waiting in all_reduce #4812 of the
  // world group"), in the order of their first rank.
  std::vector<std::string> classes;
  nlohmann::json to_json() const;
  // What the console shows under the headline: the per-rank lines of a
  // small job, else the classes; at most kConsoleLines lines.
  std::vector<std::string> console_lines() const;
  static constexpr size_t kConsoleLines = 39;  // 40 with the headline
};

// The decision (see above). `ranks` may come from several nodes, in any order.
HangVerdict judge_hang(const std::vector<RankView>& ranks, int64_t timeout_ms);

// When rank `failed` died inside a collective: whether the members of its
// group issued different calls at that call's number (an op or an element
// count that differs), said as judge_hang says a desync ("rank 2 issued
// all_reduce with 512 elements as call #30 of the world group, where ranks
// 0,1,3 issued all_reduce (256 elements): a desync ..."); "" when they
// agree, or `failed` was in no call. Gloo checks sizes itself and aborts a
// rank, often not the one that differs (the rank whose buffer is the
// smaller: "op.preamble.length <= op.nbytes"), so the failure's rank alone
// would blame a bystander. `ranks`: the views at hand (this node's).
std::string desync_at_failure(const std::vector<RankView>& ranks, int failed);

// Ranks whose time outside collectives per step is at least 1.5x the median
// of the others' (needs three or more ranks with that figure).
std::vector<int> find_stragglers(const std::vector<RankView>& ranks);

// Where rank `r` is: "waiting in all_reduce #20 of the world group for 3.1s",
// "not in a collective; last returned from ..." (a call returns once done,
// or, on NCCL, once queued on the GPU), or that it reports nothing;
// without the durations when `with_times` is false (to compare places).
std::string rank_position(const RankView& r, bool with_times = true);

// What /proc said of the rank's process, when it explains a hang by itself
// ("its process is stopped (state T: ...)"); "" otherwise.
std::string process_state(const RankView& r);

// The ranks grouped by place (see HangVerdict::classes).
std::vector<std::string> rank_classes(const std::vector<const RankView*>& ranks);

// "all_reduce #100 of the world group (1048576 elements)".
std::string describe_call(const GroupView& g, uint64_t seq);

}  // namespace ccrun::agent
