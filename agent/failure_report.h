//===- failure_report.h - What failed, first, and where ---------*- C++ -*-===//
//
// A `Failure` (ccrun/job_state.h) is one worker's (or node's) failure as
// every node of the job sees it. The report puts the root cause (the
// earliest failure) first, then the others, as a table on stderr and as
// JSON in the log directory.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ccrun/job_state.h"

namespace ccrun::agent {

// The record itself is ccrun/job_state.h's: it travels between nodes
// through the rendezvous.
using ccrun::Failure;
using ccrun::FailureCause;

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

// The report's lines about the interpreter of a Python program (`python`:
// the workers' interpreter, "" for another program): which one ran, and,
// when a failure says a module is missing, that it is the interpreter
// without it (a venv or conda python is not the first python3 on PATH).
std::string interpreter_lines(const std::string& python, const std::vector<Failure>& failures);

}  // namespace ccrun::agent
