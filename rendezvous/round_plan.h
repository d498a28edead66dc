//===- round_plan.h - Who gets which ranks in a round, worked out once -*- C++ -*-===//
//
// Once a round's participants are known, one node (its planner) reads every
// participant's NodeInfo and works out the round's shape and each node's
// place; it writes them once (round/<R>/plan and round/<R>/place/<slot>,
// ccrun/job_keys.h), and every other node reads only its own place and the
// plan: O(N) bytes per round in total, not O(N) per node.
//
// The assignment (a pure function, so any node may compute it and get the
// same answer, and tests drive it directly):
//   1. Node ranks: the nodes of the previous round first, in their previous
//      order, then newcomers in join order (dynamic backends); the join slot
//      itself (static: the slot is the given node rank). So a restart with
//      unchanged membership keeps every node's rank, as torchrun does.
//   2. RANK offsets: the sum of nproc over the lower node ranks.
//   2a. Role ranks (torchrun's _assign_worker_ranks): ROLE_RANK offset = the
//      sum of nproc over the lower node ranks of the same role, and
//      ROLE_WORLD_SIZE = the sum of nproc over the nodes of that role; two
//      passes over the nodes with one running sum per role, O(N).
//   3. The master: node rank 0's address and the port it published, and
//      whether that port is its agent's worker store.
//   4. Liveness: node rank k watches node rank k - 1's heartbeat (node 0
//      watches the last one), so each node reads one counter per interval.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

namespace ccrun::rendezvous {

// What a node published when it joined (round/<R>/node/<slot>).
struct JoinedNode {
  std::string addr;      // where the other nodes reach it
  std::string hostname;
  int nproc = 1;         // its local world size
  int master_port = 0;   // MASTER_PORT if it gets rank 0: its worker store's, or a free port
  int prev_rank = -1;    // its node rank in the previous round, -1 if none
  std::string role = "default";  // its --role (absent in the record: "default")
  bool agent_store = false;  // master_port is its agent's worker store (ccrun/rendezvous.h)

  [[nodiscard]] std::string to_json() const;
  // Throws ccrun::Error naming the key's text when it is not a NodeInfo.
  [[nodiscard]] static JoinedNode from_json(const std::string& text);
};

// Where one node stands (round/<R>/place/<slot>).
struct Place {
  int node_rank = 0;
  int rank_offset = 0;     // RANK of its LOCAL_RANK 0
  int watch = 0;           // the node rank whose heartbeat it watches
  std::string watch_addr;  // that node's address, for the message if it dies
  std::string addr;        // its own address, as published
  int role_rank_offset = 0;  // ROLE_RANK of its LOCAL_RANK 0 (step 2a)
  int role_world_size = 0;   // ROLE_WORLD_SIZE of its role (step 2a)

  [[nodiscard]] std::string to_json() const;
  [[nodiscard]] static Place from_json(const std::string& text);
};

// The round's shape (round/<R>/plan).
struct RoundShape {
  int num_nodes = 0;
  int world_size = 0;
  std::string master_addr;
  int master_port = 0;
  bool agent_store = false;  // node rank 0's agent serves the workers' store

  [[nodiscard]] std::string to_json() const;
  [[nodiscard]] static RoundShape from_json(const std::string& text);
};

struct RoundPlan {
  RoundShape shape;
  std::vector<Place> places;  // by join slot
};

// The plan for the nodes that joined, by join slot. `keep_previous_order`:
// step 1's ordering (dynamic backends); false keeps slot order (static).
[[nodiscard]] RoundPlan plan_round(const std::vector<JoinedNode>& by_slot,
                                   bool keep_previous_order);

}  // namespace ccrun::rendezvous
