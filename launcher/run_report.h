//===- run_report.h - One run's report page, from its run directory -*- C++ -*-===//
//
// `ccrun report RUN_DIR` (report_command.h) turns what a --log-dir run left
// in its directory (docs/agent.md) into one self-contained HTML page: every
// attempt on a timeline (each rank's start-up phases, failures, restarts,
// the hang verdict), each rank's steps per second over time (from
// steps.jsonl, agent/step_series.h), the root cause, and the merged stacks
// of each incident folder. The reading is report_command.cpp's; what is
// here is pure, so that unit tests drive it with made-up runs:
//
//   RunData run;                                   // as read from the directory
//   run.events.push_back({{"event", "start"}, {"attempt", 0}, ...});
//   std::string html = build_report_html(run);     // inline CSS, SVG and JS
//
// Every text taken from the run (a rank's output, a stack frame, a host
// name) is HTML-escaped; the page loads nothing from anywhere.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ccrun/job_state.h"
#include "ccrun/rank_progress.h"

namespace ccrun::launcher {

// One line of steps.jsonl: one node's ranks at one moment.
struct StepSample {
  int64_t time_ms = 0;
  int attempt = 0, node = 0, first_rank = 0;
  std::vector<int64_t> steps;  // by local rank; -1: not reporting
  std::vector<double> busy_ms;  // by local rank: own ms per step; -1 unknown; empty in older files
};

// One incident_<attempt>/ folder (agent/incident.h).
struct IncidentData {
  int attempt = 0;
  nlohmann::json verdict;     // verdict.json, null when unreadable
  std::string merged_stacks;  // stacks/merged.txt, "" when none
};

// What a run directory holds, as read (one directory per node: several
// directories of one run merge into one RunData).
struct RunData {
  std::string title;                   // the run directories, for the heading
  std::vector<nlohmann::json> events;  // events.jsonl's objects, in order
  std::vector<StepSample> steps;       // steps.jsonl's lines, in order
  nlohmann::json failure_report;       // failure_report.json; null when none
  std::vector<IncidentData> incidents;
  std::vector<std::string> warnings;   // lines or files skipped while reading, said on the page
};

// One attempt as the page shows it, derived from the events.
struct AttemptView {
  int attempt = 0;
  int64_t start_ms = 0, end_ms = 0;     // wall clock; end 0 when unknown
  std::vector<int> ranks;               // every rank seen in it, sorted
  std::vector<StartupTimeline> startup;  // the `startup` events
  std::vector<Failure> failures;        // the `failure` events
  std::string hang_headline;            // the `hang` event's, "" when none
  int64_t hang_ms = 0;                  // when it was judged
  std::vector<int> culprits;
  std::string ended;                    // "restarted", "failed", "succeeded", "stopped", "";
                                        // after a hang "hung, " before it ("hung" alone)
};

// The attempts of `run` in order (attempt numbers seen in events, samples
// or failures).
std::vector<AttemptView> attempts_of(const RunData& run);

// One line of the steps-per-second chart: a rank, or a class of ranks whose
// rates are alike (their median), when there are more ranks than
// `max_lines`.
struct RateLine {
  std::string label;  // "rank 3", "ranks 0-62,64-127 (median)"
  std::vector<int> ranks;
  // (wall ms, steps/s); a point with a negative rate starts a new segment
  // (a restart, or a rank that did not report).
  std::vector<std::pair<int64_t, double>> points;
};
std::vector<RateLine> rate_lines(const std::vector<StepSample>& samples, size_t max_lines = 12);

// The same for each rank's own time per step outside collectives (ms): the
// line a straggler stands out in when every rank's steps per second are the
// same (a synchronous job).
std::vector<RateLine> busy_lines(const std::vector<StepSample>& samples, size_t max_lines = 12);

// The root cause in one paragraph: the failure report's, else the last
// failure event's; "" for a run that did not fail.
std::string root_cause_text(const RunData& run);

// `text` with &, <, >, " and ' escaped for HTML text and attributes.
std::string html_escape(const std::string& text);

// The page.
std::string build_report_html(const RunData& run);

}  // namespace ccrun::launcher
