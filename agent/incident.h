//===- incident.h - One folder of evidence per failed attempt ----*- C++ -*-===//
//
// When an attempt fails (a crash, an OOM kill, a hang) and the run keeps its
// logs (--log-dir), each agent writes what it knows of its own ranks into
//
//   <run>/incident_<attempt>/
//     verdict.json          the failure records, and the hang verdict (its
//                           headline, culprits, every rank's line, the
//                           classes, every rank's progress) when there was one
//     stacks/merged.txt     this node's ranks merged by identical stack
//     stacks/job_merged.txt on the node that merges a job of several nodes'
//                           stacks (job_stacks.h): every node's
//     stacks/rank_<R>.python.txt, rank_<R>.native.txt
//     logs/rank_<R>.log     the last 50 lines of its stdout and of its stderr
//     nccl_flight_recorder/ torch's NCCL flight-recorder dumps, as torch wrote
//                           them (torch's analyzer reads them)
//     nccl_ras.txt          NCCL's RAS status, when a local NCCL answered
//
// so that one folder answers "what happened" without reading whole logs.
// Stacks are merged by their text with addresses and thread ids left out:
// at 1,000 ranks, a few classes ("ranks 0-62,64-127 (127) <- train.py:88 in
// step") instead of a thousand stacks. The pure parts (normalize_stack,
// stack_classes, program_frame, last_lines) are unit-tested.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ccrun::agent {

// Ranks whose stacks read the same once normalized.
struct StackClass {
  std::vector<int> ranks;
  std::vector<int> pids;
  std::string python;  // the first rank's, as captured
  std::string native;
  std::string where;   // its program_frame, "train.py:88 in step"; "" when none
  uint64_t digest = 0; // FNV-1a of its normalized stack: the same on every node (job_stacks.h)
  // The stack it is known by: its Python one when it has one, else its native one.
  const std::string& shown() const { return python.empty() ? native : python; }
  // "ranks 0,1,3 (3) <- train.py:88 in step"
  std::string title() const;
};

// `stack` without what differs between two ranks in the same place: hex
// addresses, thread ids and pids.
std::string normalize_stack(const std::string& stack);

// `stacks`: the agent's stacks JSON (an array of {rank, pid, python,
// native}). Classes by identical normalized Python stack (native when there
// is no Python one), in the order of their first rank.
std::vector<StackClass> stack_classes(const nlohmann::json& stacks);

// Where a rank is in its program's own code: the innermost frame of the
// thread that dumped (faulthandler's "Current thread", else the first thread)
// whose file is neither Python's library nor an installed package nor
// ccrun's hook (is_library_file), as "file.py:LINE in FUNC"; the innermost
// frame when every frame is library code; "" when there is none. Every torch
// rank waits inside torch (distributed_c10d.py:1541 in all_reduce), which the
// verdict already says: the line of the program that called it is what tells
// one class of ranks from another to the person who wrote it.
std::string program_frame(const std::string& python);

// Whether a frame's file is library code: Python's own (a frozen module, a
// file under lib/pythonX.Y/), an installed package (under site-packages or
// dist-packages) or ccrun's start-up hook (ccrun_progress.py).
bool is_library_file(const std::string& path);

// The last `n` lines of `text` (all of it when it has fewer).
std::string last_lines(const std::string& text, size_t n);

// What the folder holds; the agent fills it in.
struct IncidentMaterial {
  int attempt = 0;
  nlohmann::json failures = nlohmann::json::array();  // Failure::to_json() each
  nlohmann::json hang;                                // the verdict and stacks, or null
  struct RankLogs {
    int rank = -1;
    std::filesystem::path stdout_log, stderr_log;  // may not exist
  };
  std::vector<RankLogs> logs;
  std::string nccl_ras;  // "" when none answered
};

// Writes <run_root>/incident_<attempt>/ and returns its path. A file that
// cannot be written is skipped with a warning: evidence is best effort.
std::filesystem::path write_incident(const std::filesystem::path& run_root,
                                     const IncidentMaterial& m);

}  // namespace ccrun::agent
