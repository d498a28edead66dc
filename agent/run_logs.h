//===- run_logs.h - Where one run's logs and reports are written -*- C++ -*-===//
//
// Every run of ccrun gets a directory of its own, as torchrun does:
//
//   <log_dir>/<run_id>_<8 hex digits>/
//     attempt_<n>/<local_rank>/{stdout,stderr}.log, error.json
//     failure_report.json      every failure of every attempt
//     events.jsonl             one JSON line per join, start, failure,
//                              restart and stop, with time and attempt
//     steps.jsonl              each rank's steps, sampled (step_series.h)
//
// (named by local rank, as torchrun names them, so every node has
// attempt_<n>/0/), so a second run with the same --rdzv-id never appends to the first run's
// files or leaves its report beside the new one. Without --log-dir a
// temporary directory holds only the workers' error files, one level flat
// (attempt_<n>/error_<local_rank>.json: no directory per rank, whose
// creation and removal cost 20 ms a launch of 128 workers on ext4), and is
// removed when the run ends. Output that -r/--redirects keeps off the console
// is not thrown away for want of --log-dir: redirected_logs_home() gives it a
// kept temporary home, as torchrun does.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <filesystem>
#include <string>

#include "ccrun/job_spec.h"

namespace ccrun::agent {

// Where the run's kept logs go: --log-dir, else, when -r/--redirects keeps a
// stream off the console, a new directory ccrun-logs-XXXXXX under TMPDIR
// (kept, and said); else "" (nothing kept). Throws ccrun::Error when that
// directory cannot be made.
std::string logs_home(const LogSpec& logs);

// True when -r/--redirects keeps any stream of any local rank off the console.
bool redirects_anything(const LogSpec& logs);

class RunLogs {
 public:
  // Creates the run's directory; throws ccrun::Error naming the directory
  // and the reason when it cannot be made. A temporary directory is named
  // ccrun-<token>-XXXXXX, so the orphan killer of a SIGKILLed agent finds
  // and removes it (orphan_killer.h).
  RunLogs(const std::string& log_dir, const std::string& run_id, const std::string& token = "");
  ~RunLogs();  // removes a temporary directory
  RunLogs(const RunLogs&) = delete;  // owns a directory
  RunLogs& operator=(const RunLogs&) = delete;

  // True when the user asked for the logs to be kept (--log-dir).
  [[nodiscard]] bool kept() const { return kept_; }
  [[nodiscard]] const std::filesystem::path& root() const { return root_; }

  // attempt_<attempt>/<local_rank>/, created.
  std::filesystem::path rank_dir(int attempt, int local_rank) const;
  // The worker's TORCHELASTIC_ERROR_FILE (its directory created):
  // rank_dir(...)/error.json when kept (torchrun's layout), else
  // attempt_<attempt>/error_<local_rank>.json.
  std::filesystem::path error_file(int attempt, int local_rank) const;

  // Writes `name` under the root; a failure is reported on stderr (a full
  // disk must not pass silently) and returns false.
  bool write_file(const std::string& name, const std::string& text) const;

  // Appends one line to events.jsonl (kept runs only): `fields` is a JSON
  // object's members, to which "time" (ISO 8601 UTC, ms), "time_ms",
  // "event" and "attempt" are added. A failed write is reported once.
  void event(const std::string& name, int attempt, const std::string& fields_json = "{}");

 private:
  std::filesystem::path root_;
  bool kept_ = false;
  int events_fd_ = -1;
  bool events_failed_ = false;
};

}  // namespace ccrun::agent
