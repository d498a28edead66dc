//===- job_stacks.h - A hang's stacks merged across the job's nodes -*- C++ -*-===//
//
// Each agent merges its own ranks' stacks into classes (incident.h). A job
// of many nodes would then print the same class once per node: at 128
// nodes, hundreds of copies of one stack. So on a hang every node adds its
// classes to its share of the evidence (hang_monitor.h), one representative
// stack per class, and the comparing node merges every node's into the
// job's classes, printed once:
//
//   stacks of ranks 0-62,64-1023 (1023) on nodes 0-127 <- train.py:88 in step
//   stacks of rank 63 on node 7 <- data.py:41 in __next__
//
// Classes are matched by a digest of their normalized stack
// (normalize_stack), so a node's share need not repeat a stack's whole text
// to be merged; the text it carries is capped. Every rank's own stacks stay
// in its node's report and incident folder.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "incident.h"

namespace ccrun::agent {

// The most of a class's stack a share carries; the rest is cut, with a
// line saying where the whole is.
constexpr size_t kSharedStackBytes = 32 * 1024;

// Ranks of the job whose stacks read the same, on one node or several.
struct JobStackClass {
  std::vector<int> ranks;  // sorted
  std::vector<int> nodes;  // sorted
  std::string where;       // its program_frame (incident.h); "" when none
  std::string stack;       // one rank's, Python when it has one, else native
  bool python = false;
  // "ranks 0-2 (3) on nodes 0,1 <- train.py:88 in step"
  std::string title() const;
};

// The job's classes.
struct JobStacks {
  std::vector<JobStackClass> classes;  // in the order of their first rank
  // {"classes": [{title, ranks, nodes, where, python, stack}]}: the report's
  // and the incident folder's (stacks/job_merged.txt).
  nlohmann::json to_json() const;
};

// Adds this node's `classes` to `share` (its share of the evidence, a JSON
// object), each stack cut to `cap` bytes.
void add_stack_classes(nlohmann::json& share, const std::vector<StackClass>& classes,
                       size_t cap = kSharedStackBytes);

// This node's classes (`mine`, node `node_rank`) merged with those in the
// other nodes' shares (`shares` by node rank, this node's skipped, as is a
// share without classes: evidence_shares.h names the nodes whose share did
// not come).
JobStacks job_stack_classes(const std::vector<StackClass>& mine, const std::vector<nlohmann::json>& shares,
                            int node_rank);

}  // namespace ccrun::agent
