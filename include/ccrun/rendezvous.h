//===- ccrun/rendezvous.h - How the agents of a job meet -------*- C++ -*-===//
//
// A `RendezvousHandler` lets the `nnodes` agents of one job agree, round
// after round, on who takes part, each node's rank, the world size and the
// master's address, and then keeps the round under watch: a node that fails
// its workers, dies, hangs or arrives late ends the round for everyone.
//
//   auto rdzv = create_rendezvous_handler(options, connect);
//   for (;;) {
//     RendezvousInfo info = rdzv->next_rendezvous();  // blocks
//     rdzv->watch([&](const RoundEvent& e) { /* post to the agent loop */ });
//     ... run workers; on failure: rdzv->request_restart(failure, false) ...
//     ... on success: rdzv->mark_done(), then wait for kAllDone ...
//   }
//
// The handler keeps its state in a Store under "ccrun/<run_id>/" in a
// documented JSON format (the key layout is in include/ccrun/job_keys.h;
// the rounds in docs/rendezvous.md).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ccrun/job_spec.h"
#include "ccrun/job_state.h"
#include "ccrun/rendezvous_backend.h"
#include "ccrun/store.h"

namespace ccrun::rendezvous {

// One node of a round, as the others see it.
struct NodeInfo {
  std::string addr;          // address the other nodes reach this node at
  std::string hostname;
  int local_world_size = 0;  // its nproc_per_node
};

// The outcome of one rendezvous round, for this node.
struct RendezvousInfo {
  int round = 0;             // rounds completed before this one
  int node_rank = 0;         // GROUP_RANK
  int num_nodes = 1;         // GROUP_WORLD_SIZE
  int rank_offset = 0;       // RANK of this node's LOCAL_RANK 0
  int world_size = 1;        // sum of local_world_size over nodes
  // ROLE_RANK of LOCAL_RANK 0 and ROLE_WORLD_SIZE: the same counts over the
  // nodes of this node's role only (torchrun's role ranks).
  int role_rank_offset = 0;
  int role_world_size = 1;
  NodeInfo self;             // this node, as the others see it
  std::string master_addr;   // node 0's address, as the others reach it
  int master_port = 0;       // MASTER_PORT for the workers
  // The workers meet in an agent's store (TORCHELASTIC_USE_AGENT_STORE=True,
  // every worker a client of MASTER_ADDR:MASTER_PORT): static, the job's
  // store; dynamic, the rank-0 agent's worker store (torch 2.x's shared
  // TCPStore). False: the rank-0 worker hosts one at MASTER_PORT.
  bool use_agent_store = false;
};

// Why the current round ends. Only the first event of a round is delivered.
struct RoundEvent {
  using Kind = RoundEndKind;  // ccrun/job_state.h: one line per kind
  Kind kind = Kind::kClosed;
  int node_rank = -1;  // the node concerned, -1 when none
  std::string detail;
  std::optional<Failure> failure;  // kRestartRequested: the failure `detail` holds
  int stop_signal = 0;  // kClosed by a stop signal on some node: its number
};

// Opens a new connection to the job's store. The handler calls it for the
// connections it blocks on (a watcher parks on a key; its requests must not
// queue behind others).
using StoreConnector = std::function<std::shared_ptr<store::Store>()>;

// The handler's settings; the timing (join, last call, close, keep-alive)
// is the job's (RendezvousSpec).
struct RendezvousOptions : RendezvousTiming {
  std::string run_id = "none";
  Backend backend = Backend::kStatic;  // c10d and etcd: the same dynamic rounds
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank = 0;                // static only
  int local_world_size = 1;
  std::string role = "default";     // --role: ROLE_RANK counts per role
  std::string local_addr;           // this node's address for the others
  std::string master_addr;          // static: node 0's address
  int master_port = 0;              // static: the store's port
  // Dynamic: the port of this agent's worker store for the round it joins
  // (asked at each join; the agent renews the store between rounds). Empty,
  // or 0: none, and the round's rank-0 worker hosts one at a free port.
  std::function<int()> worker_store_port;
  // Static rounds after the first: called by the round's planner once every
  // node joined (so every worker of the round before has exited) and before
  // the plan lets any node start its workers. The agent that hosts the job's
  // store empties the workers' keys there: torch 2.x's workers use
  // MASTER_PORT's store with no per-attempt prefix (they expect a new store
  // per restart), so Gloo's addresses of the attempt before would be read
  // back as the new ones. Empty: nothing to clear.
  std::function<void()> clear_worker_keys;
  // How this job's store forgets a finished run's id, for the message of a
  // node that arrives after that run ended (already_ran_message in
  // ccrun/finished_run.h); "": none said.
  std::string forget_hint;
};

class RendezvousHandler {
 public:
  virtual ~RendezvousHandler() = default;

  // Joins the next round and blocks until it closes. Throws TimeoutError
  // after join_timeout, saying how many nodes came of how many were needed,
  // and RendezvousClosedError when the job was closed. A node that comes to
  // a full round of an elastic job waits as a hot spare (round_end.h) until
  // a round's end admits it, with no join_timeout; JobFinishedError when the
  // job succeeded meanwhile. The first call throws JobAlreadyRanError when
  // the id's run had ended before it (closed, or its last round all_done:
  // ccrun/finished_run.h), and joins nothing.
  virtual RendezvousInfo next_rendezvous() = 0;

  // Heartbeats this node and watches the current round until it ends, then
  // calls `on_event` once, from a thread of the handler. Stops at the next
  // next_rendezvous() or shutdown().
  virtual void watch(std::function<void(const RoundEvent&)> on_event) = 0;

  // Ends the current round for every node because this node's workers
  // failed; `failure` reaches every node (root cause report). `leaves`: this
  // node will not rejoin (it excludes itself, ccrun/exclusion.h), so the
  // next round waits for one node fewer and admits a hot spare in its place
  // (if this request ends the round; an earlier end stands as it was).
  // Returns whether this request ended the round (its failure is the
  // round's root cause).
  virtual bool request_restart(const Failure& failure, bool leaves) = 0;

  // True while next_rendezvous() waits as a hot spare: the node has no
  // place in any round, so its stop is not the job's.
  [[nodiscard]] virtual bool waiting_as_spare() const = 0;

  // How many agents wait as hot spares for the current round's end.
  [[nodiscard]] virtual int spares_waiting() = 0;

  // How a stand_by() ended.
  enum class StandByEnd {
    kTimeUp,    // `until_ms` came
    kFinished,  // the job succeeded without this node
    kClosed,    // the job was closed (failed or stopped)
  };

  // Waits with no place in any round (an excluded node sitting out its
  // cool-down) until the wall clock reaches `until_ms` or the job is over,
  // following the job's rounds as they end. On the node that hosts the
  // store, a job's end (finished or closed) returns once every node has left
  // its last round (at most `leave_timeout`), so no node loses the store
  // while reading the end. No join_timeout applies: the job may run for days.
  virtual StandByEnd stand_by(int64_t until_ms, bool hosts_store,
                              std::chrono::milliseconds leave_timeout) = 0;

  // This node's workers all exited 0. When every node of the round has
  // called it, watchers receive kAllDone (the exit barrier). Idempotent; the
  // watcher repeats it into a store that lost its state (a restarted
  // ccrun-rendezvous), so the barrier cannot hang on a lost count.
  virtual void mark_done() = 0;

  // Closes the rendezvous for good: later joins throw RendezvousClosedError,
  // and watchers of the current round receive kClosed with the reason.
  virtual void set_closed(const ClosedRecord& record) = 0;

  // Failure reports recorded in the current round by every node, oldest
  // first (as given to request_restart).
  [[nodiscard]] virtual std::vector<Failure> failures() = 0;

  // Leaves the current round for good (the job is over on this node). On
  // the node hosting the store, `wait_for_all` holds it until every node has
  // left (at most `timeout`), so no node loses the store while reading the
  // round's end.
  virtual void leave(bool wait_for_all, std::chrono::milliseconds timeout) = 0;

  // Stops heartbeats and watchers; returns when they have stopped.
  virtual void shutdown() = 0;

  // The agent's attempt number (its restart count), published with every
  // heartbeat for `ccrun status`.
  virtual void set_attempt(int attempt) = 0;

  // This node's ranks' progress, published with every heartbeat in the
  // node's status: node 0's agent judges hangs from every node's
  // (docs/hangs.md), `ccrun status` shows them.
  virtual void set_progress(std::vector<RankView> ranks) = 0;

  // Writes this node's status (with the progress set last) now, not at the
  // next heartbeat: an attempt's ranks show in `ccrun status` and `top` at
  // its first progress sample. One store write; throws ccrun::Error.
  virtual void publish_status() = 0;

  // Every node's last published status in the current round, by node rank;
  // nullopt for a node that has not beaten yet.
  [[nodiscard]] virtual std::vector<std::optional<NodeStatus>> node_statuses() = 0;

  // Publishes what this node found of the current round's hang (JSON), for
  // the other nodes to compare with theirs.
  virtual void publish_hang_evidence(const std::string& mine) = 0;

  // Every node's findings of the current round's hang, by node rank (""
  // for a node that has not published), waiting at most `wait` for all of
  // them: each node publishes once it has its ranks' evidence.
  [[nodiscard]] virtual std::vector<std::string> hang_evidence(std::chrono::milliseconds wait) = 0;

  // Waits at most `wait` for every node's findings of the current round's
  // hang, without reading them; true when all have come. A node holds its
  // ranks until the others have taken their stacks: a rank stopped first
  // would fail its peers, whose stacks would then show that failure, not
  // the hang.
  [[nodiscard]] virtual bool await_hang_evidence(std::chrono::milliseconds wait) = 0;
};

// The handler for options.backend: static rounds, or dynamic ones (c10d,
// etcd) on the store `connect` opens.
std::unique_ptr<RendezvousHandler> create_rendezvous_handler(
    const RendezvousOptions& options, StoreConnector connect);

}  // namespace ccrun::rendezvous
