//===- step_series.h - Each rank's steps over time, kept in the run dir -*- C++ -*-===//
//
// `ccrun report` draws each rank's steps per second over the whole run, so
// that a straggler or a slow attempt can be seen after the fact. The agent
// already reads its workers' progress records every second (the hang
// monitor's sample, hang_monitor.h); with --log-dir it appends one line per
// sample to <run>/steps.jsonl, no thread or timer of its own:
//
//   {"time_ms":1764150000123,"attempt":1,"node":0,"first_rank":0,"steps":[120,118,-1],
//    "busy_ms":[20.1,61.3,-1]}
//
// (by local rank: `steps` marked, -1 for a rank that reports no progress;
// `busy_ms` its own time per step outside collectives over the last window,
// as `ccrun status` shows it, -1 when unknown: in a synchronous job every
// rank makes the same steps per second, and the straggler is the rank whose
// own time per step is longest). One write(2) of ~150 bytes per sample. The file stays small over long runs:
// the period starts at 1 s and doubles after every 1,000 lines, up to a line
// every 64 s (a day: ~6,400 lines; a week: ~14,500 a node), and the first
// sample of each attempt is always kept, so a restart is never missed.
//
//   StepSeries series(run_root / "steps.jsonl");
//   series.sample(wall_clock_ms(), attempt, node_rank, first_rank, views);
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ccrun/rank_progress.h"

namespace ccrun::agent {

// Which samples are kept: a pure rule, unit-tested.
class StepThinning {
 public:
  static constexpr int64_t kFirstPeriodMs = 1'000;
  static constexpr int64_t kLongestPeriodMs = 64'000;
  static constexpr int64_t kLinesPerPeriod = 1'000;  // lines before the period doubles

  // Whether a sample at `now_ms` of `attempt` is kept; when it is, counts it.
  bool take(int64_t now_ms, int attempt);
  [[nodiscard]] int64_t period_ms() const { return period_ms_; }

 private:
  int64_t period_ms_ = kFirstPeriodMs;
  int64_t last_ms_ = 0;
  int64_t lines_at_period_ = 0;
  int last_attempt_ = -1;
};

// One sample as a line of steps.jsonl (with its newline).
std::string step_line(int64_t time_ms, int attempt, int node_rank, int first_rank,
                      const std::vector<RankView>& ranks);

class StepSeries {
 public:
  // Appends to `path` (created at the first kept sample).
  explicit StepSeries(std::filesystem::path path) : path_(std::move(path)) {}
  ~StepSeries();
  StepSeries(const StepSeries&) = delete;  // owns a descriptor
  StepSeries& operator=(const StepSeries&) = delete;

  // Appends a line for `ranks` when the thinning keeps it. A write that
  // fails is reported once on stderr, and the series stops.
  void sample(int64_t now_ms, int attempt, int node_rank, int first_rank,
              const std::vector<RankView>& ranks);

 private:
  std::filesystem::path path_;
  StepThinning thinning_;
  int fd_ = -1;
  bool failed_ = false;
};

}  // namespace ccrun::agent
