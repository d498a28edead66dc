//===- evidence_shares.h - The nodes' shares of a hang's evidence, as read -*- C++ -*-===//
//
// On a hang, every node of a job of several nodes publishes its share of the
// evidence, one JSON object in the round's store (its ranks' NCCL flight
// records: flight_recorder.h; its stack classes: job_stacks.h), and the
// comparing node reads every node's, waiting a few seconds at most
// (hang_monitor.h). A node whose share did not come within that wait is
// missing from both the stacks and the findings: said once, here, for both.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ccrun::agent {

// The shares as read from the store, by node rank: null where one did not
// come ("") or is not JSON.
std::vector<nlohmann::json> parse_shares(const std::vector<std::string>& texts);

// The nodes, other than `node_rank`, whose share is not a JSON object: it
// did not come, or is not one.
std::vector<int> missing_shares(const std::vector<nlohmann::json>& shares, int node_rank);

// "the evidence of node 2 did not come within 5s: its ranks' stacks and
// flight records are in its own report"; "" when none is missing.
std::string missing_shares_line(const std::vector<int>& nodes, std::chrono::milliseconds waited);

}  // namespace ccrun::agent
