//===- top_frame.h - What `ccrun top` draws, as pure functions -*- C++ -*-===//
//
// `ccrun top` (top_command.h) shows a running job live: a header with the
// job's state, the hang verdict or last failure, then one row per rank, or
// one per class of ranks when the terminal has fewer lines than the job has
// ranks. This file turns one read of the job's store (ccrun/job_state.h's
// JobState, as `ccrun status` reads it) into the lines of one frame; it does
// no I/O, so that unit tests can draw any job at any terminal size:
//
//   StepRates rates;
//   rates.update(job);                        // after every read of the store
//   TopSnapshot snap{job, "10.0.0.1:29400", rates.by_rank(job), "", true};
//   Frame f = render_frame(snap, 120, 40, TopSort::kRank);
//   std::fputs(frame_ansi(f, 120).c_str(), stdout);   // or frame_plain(f)
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ccrun/job_state.h"

namespace ccrun::launcher {

// The order of the rows; `s` cycles through them.
enum class TopSort {
  kRank,  // by (first) rank
  kStep,  // fewest steps first
  kLag,   // furthest from the median step first, either way
};
TopSort next_sort(TopSort s);
std::string_view to_string(TopSort s);

// Steps per second of each rank, from two successive reads of its step
// counter: the counter's change between two samples of its node, over the
// time between them (reads of the same sample are not counted). Until a
// rank has two samples, the rate its agent published.
class StepRates {
 public:
  // Takes the read `job`: remembers each rank's steps at its node's beat.
  void update(const JobState& job);
  // Each rank's rate, by rank.
  [[nodiscard]] std::map<int, double> by_rank(const JobState& job) const;

 private:
  struct Sample {
    uint64_t steps = 0;
    int64_t beat_ms = 0;  // when it was sampled (NodeStatus::sampled_ms, else beat_ms)
    int attempt = 0;
    double rate = -1;  // -1: not measured yet
  };
  std::map<int, Sample> samples_;  // by rank
};

// One read of the job, and what a frame needs beside it.
struct TopSnapshot {
  JobState job;
  std::string endpoint;              // as the user named the store
  std::map<int, double> rates;       // steps/s by rank (StepRates); missing: the record's
  std::string store_problem;         // non-empty: the last read failed; `job` is the one before
  bool interactive = false;          // the footer names the keys
  int64_t now_ms = 0;                // wall clock of the read (0: now)
  int64_t stale_after_ms = 0;        // a row's data older than this says its age (0: never)
};

// A frame: its lines, plain text, and which of them are emphasized (reverse
// video: the header, the column titles, a hang verdict, its culprit's row).
struct Frame {
  std::vector<std::string> lines;
  std::vector<bool> emphasized;  // by line
  void add(std::string line, bool emphasize = false);
};

// Terminals smaller than this get one line saying so instead of a frame.
inline constexpr int kMinWidth = 60;
inline constexpr int kMinHeight = 6;

// The frame of `snap` for a `width` x `height` terminal: every line at most
// `width` characters, at most `height` lines (0 for either: no limit, one
// row per rank). One row per rank when they fit, else ranks in the same
// state share a row ("0-62,64-127").
[[nodiscard]] Frame render_frame(const TopSnapshot& snap, int width, int height, TopSort sort);

// The frame as escape codes that redraw a `width`-column screen in place:
// cursor home, each line cleared to its end, emphasized lines in reverse
// video, the rest of the screen cleared.
[[nodiscard]] std::string frame_ansi(const Frame& f, int width);
// The frame as plain lines, no escape codes (--once, output not a terminal).
[[nodiscard]] std::string frame_plain(const Frame& f);

}  // namespace ccrun::launcher
