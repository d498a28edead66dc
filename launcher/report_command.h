//===- report_command.h - `ccrun report`: a run's report page -*- C++ -*-===//
//
// `ccrun report RUN_DIR... [--output FILE]` reads the directory that a run
// with --log-dir left (events.jsonl, steps.jsonl, failure_report.json,
// incident_<n>/: docs/agent.md) and writes one self-contained HTML page
// (run_report.h), by default RUN_DIR/report.html. Several directories of
// one run (one per node) merge into one page. It only reads the run
// directory and writes the page: it can run while the job still runs, or
// long after, on any machine that has the files.
//
// A missing directory, or one that is not a run directory, is an error that
// says what to give instead; a line that is not JSON is skipped with a
// warning (on stderr and on the page). Exit status: 0 written, 1 the page
// could not be written or the directory read, 2 a bad command line.
//
// Like `status` and `top`, `report` is a subcommand only as ccrun's first
// argument.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

#include "completion.h"

namespace ccrun::launcher {

// `ccrun report`'s flags, for the completion script.
std::vector<FlagCompletion> report_flag_completions();

// `args`: what follows "report" on the command line. Returns the exit status.
int run_report_command(const std::vector<std::string>& args);

}  // namespace ccrun::launcher
