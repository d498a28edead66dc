//===- failure_report.h - What failed, first, and where ---------*- C++ -*-===//
//
// A `Failure` is one worker's (or node's) failure as every node of the job
// sees it: it travels between nodes as JSON through the rendezvous. The
// report puts the root cause (the earliest failure) first, then the others,
// as a table on stderr and as JSON in the log directory.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ccrun::agent {

struct Failure {
  int node_rank = -1;
  std::string hostname, addr;
  int rank = -1, local_rank = -1;  // -1 for a node failure
  int pid = 0;
  int exit_code = 0;
  int signal = 0;
  int64_t time_ms = 0;     // wall clock, ms since the epoch (for ordering)
  int attempt = 0;
  std::string cause;       // what ccrun found behind it: "hang" (a hang verdict), "oom"
                           // (the kernel's OOM killer), "timer" (an expired torch
                           // FileTimer); "" for a plain exit or signal
  std::string message;     // error file message, or "node stopped heartbeating"
  std::string stderr_tail;

  std::string to_json() const;
  static Failure from_json(const std::string& json);  // tolerant
};

// Starts each report line of an agent started by the ssh fan-out
// (--exit-on-stdin-eof), so that the launching ccrun can show the report of
// one node only: every node prints the same one.
inline constexpr const char* kReportMarker = "ccrun-report| ";

// Reads torch's error file (written by @record): the message and its
// traceback, or "" when absent/unreadable.
std::string read_error_file(const std::string& path);

// The report: root cause first. `failures` may be in any order.
std::string format_report(const std::string& run_id, std::vector<Failure> failures);
// The JSON report: `final` are the failures of the attempt that ended the
// job (its root cause first), `all` every failure of every attempt, oldest
// first; `reason` why the job was not restarted again.
std::string report_json(const std::string& run_id, std::vector<Failure> final,
                        std::vector<Failure> all, const std::string& reason);

// The root cause of `failures`: the earliest (the report's first); a
// default Failure when there is none.
Failure root_cause(std::vector<Failure> failures);

// What ccrun writes to its own TORCHELASTIC_ERROR_FILE when the job fails,
// as torchrun's main (decorated with torch's @record) does for a scheduler:
// `worker_record`, the text of the root cause's error file when this node
// has it, with "errorCode" set to the exit code (-N for signal N); else a
// record in torch's format ({"message": {"message", "extraInfo":
// {"py_callstack", "timestamp"}, "errorCode"}}) made from `root`.
std::string launcher_error_record(const Failure& root, const std::string& worker_record);

// ccrun's own error in the same format ("<type>: <what>", `what` again as
// py_callstack: ccrun has no Python stack to give), timestamped
// `unix_seconds`.
std::string own_error_record(const std::string& type, const std::string& what,
                             int64_t unix_seconds);

}  // namespace ccrun::agent
