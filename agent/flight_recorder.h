//===- flight_recorder.h - What torch's NCCL flight recorder says of a hang -*- C++ -*-===//
//
// The start-up hook sees a torch collective from Python, and an NCCL call
// returns once it is queued on the GPU: a rank whose GPU never runs it (a
// kernel before it that does not end, NCCL waiting for a peer) looks to the
// hook like a rank outside any collective, blocked in whatever waits for the
// GPU next. On a hang the agent has each of its ranks' flight-recorder dumps
// (hang_evidence.h): per process group, the last collective enqueued,
// started (only with TORCH_NCCL_ENABLE_TIMING=1) and completed on the GPU,
// and the recent collectives with their state. This reads a dump (torch's
// pickle, pickle_reader.h) and says, for the node's ranks:
//   - which ranks issued fewer collectives of a group than the others
//     ("rank 2 has not issued all_reduce #21 of group 0 (default_pg), which
//     ranks 0,1,3 issued; its last is #20");
//   - which collective each rank's GPU has not finished, and how far it got:
//     queued behind other work (scheduled, not started), or its kernel
//     running (started: waiting for a peer's part, or the network);
//   - or that every collective issued has completed on the GPU, so the hang
//     is outside NCCL.
// Each finding's ranks are one compressed list, whatever their number.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ccrun::agent {

// One collective of a group, as the flight recorder last saw it.
struct FlightEntry {
  int64_t seq = -1;         // collective_seq_id
  std::string op;           // "all_reduce" (profiling_name without "nccl:")
  std::string state;        // "scheduled", "started" or "completed"
  int64_t created_ns = 0;   // wall clock, when it was issued
  std::string shape;        // "256 Float"; "" when unknown
};

// A process group in one rank's dump.
struct FlightGroup {
  std::string id;    // pg id, "0" for the default group
  std::string desc;  // "default_pg", or the group's description
  int64_t enqueued = -1, started = -1, completed = -1;  // -1: none (started: not timed)
  std::vector<FlightEntry> entries;  // its collectives in the dump, oldest first
};

struct FlightRecord {
  int rank = -1;
  std::vector<FlightGroup> groups;
};

// A dump's value (read_pickle of it) as rank `rank`'s record. Tolerant of
// fields a torch version lacks; point-to-point calls are left out.
FlightRecord flight_record_from_dump(int rank, const nlohmann::json& dump);

// Reads and parses the dump file at `path`; nullopt, with `error` set, when
// it cannot be read or is not a flight-recorder pickle.
std::optional<FlightRecord> read_flight_record(int rank, const std::string& path, std::string& error);

// A record as JSON, compact: each group's counters and, of its entries, only
// those the findings read (the last one issued, and the oldest one the GPU
// has not finished), so that the findings on records read back are those on
// the whole ones. Agents exchange their ranks' records so (hang_monitor.h):
// a rank behind on another node is compared with this node's.
nlohmann::json flight_record_to_json(const FlightRecord& record);
FlightRecord flight_record_from_json(const nlohmann::json& j);  // tolerant: a field missing reads as its default

// Adds this node's ranks' records, compact, to `share` (its share of a
// hang's evidence for the other nodes, a JSON object: hang_monitor.h).
void add_flight_records(nlohmann::json& share, const std::vector<FlightRecord>& records);

// What this node's records (`mine`) and the records in the other nodes'
// shares say (`shares` by node rank, this node's own skipped, as is a share
// without records: evidence_shares.h names the nodes whose share did not
// come); nothing when no node has records, as in a job without NCCL.
// `now_ns` as flight_recorder_findings'.
std::vector<std::string> job_flight_findings(std::vector<FlightRecord> mine,
                                             const std::vector<nlohmann::json>& shares, int node_rank,
                                             int64_t now_ns);

// `message`, a hang's verdict that names no cause (HangVerdict::cause_named),
// with the first of the flight recorders' `findings` after it: "...; NCCL
// flight recorder: rank 0: all_reduce #20 of group 0 (default_pg), 256 Float,
// issued 10.2s ago, not completed on the GPU: ..."; as it is without findings.
std::string with_flight_finding(const std::string& message, const std::vector<std::string>& findings);

// What the records say, one line per finding (none without records);
// `now_ns` (wall clock) dates the pending collectives.
std::vector<std::string> flight_recorder_findings(const std::vector<FlightRecord>& records, int64_t now_ns);

}  // namespace ccrun::agent
