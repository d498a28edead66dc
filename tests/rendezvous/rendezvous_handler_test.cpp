// The rendezvous protocol with several agents as threads over one HashStore:
// rank assignment, last call, timeouts, and every way a round ends.
#include <catch2/catch.hpp>

#include <future>
#include <map>
#include <set>
#include <thread>

#include "ccrun/error.h"
#include "ccrun/hash_store.h"
#include "ccrun/rendezvous.h"
#include "ccrun/job_keys.h"
#include "ccrun/store_server.h"
#include "ccrun/tcp_store.h"
#include "rendezvous/rendezvous_nodes.h"
#include "round_plan.h"

using namespace ccrun::rendezvous;
using ccrun::Failure;
using ccrun::FailureCause;
using namespace ccrun::store;
using namespace ccrun::rendezvous::testing;
using namespace std::chrono_literals;

TEST_CASE("static: ranks follow node ranks, heterogeneous nproc", "[rendezvous]") {
  auto store = std::make_shared<HashStore>();
  std::vector<RendezvousOptions> opts;
  for (int i = 0; i < 3; ++i) {
    auto o = options("static", 3, 3);
    o.node_rank = i;
    o.local_world_size = i + 1;
    o.local_addr = "10.0.0." + std::to_string(i + 1);
    opts.push_back(o);
  }
  auto nodes = join_all(store, opts);
  CHECK(nodes[0]->info.rank_offset == 0);
  CHECK(nodes[1]->info.rank_offset == 1);
  CHECK(nodes[2]->info.rank_offset == 3);
  for (auto& n : nodes) {
    CHECK(n->info.world_size == 6);
    CHECK(n->info.num_nodes == 3);
    CHECK(n->info.master_addr == "10.0.0.1");
    CHECK(n->info.master_port == 29500);
    CHECK(n->info.use_agent_store);
  }
}

TEST_CASE("dynamic: unique ranks, node 0 picks the master port", "[rendezvous]") {
  auto store = std::make_shared<HashStore>();
  std::vector<RendezvousOptions> opts(3, options("c10d", 3, 3));
  for (int i = 0; i < 3; ++i) opts[i].local_addr = "127.0.0." + std::to_string(i + 1);
  auto nodes = join_all(store, opts);
  std::set<int> ranks;
  for (auto& n : nodes) {
    ranks.insert(n->info.node_rank);
    CHECK(n->info.world_size == 3);
    CHECK(n->info.master_port > 0);
    CHECK(n->info.master_port == nodes[0]->info.master_port);
    CHECK_FALSE(n->info.use_agent_store);
  }
  CHECK(ranks == std::set<int>{0, 1, 2});
}

TEST_CASE("dynamic: node rank 0's worker store is the master, and the workers use it",
          "[rendezvous]") {
  // Node 1 has none (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 there): what counts
  // is the store of whichever node gets rank 0, the same answer everywhere.
  auto store = std::make_shared<HashStore>();
  std::vector<RendezvousOptions> opts(2, options("c10d", 2, 2));
  opts[0].local_addr = "127.0.0.1";
  opts[1].local_addr = "127.0.0.2";
  opts[0].worker_store_port = [] { return 4321; };
  auto nodes = join_all(store, opts);
  const auto& rank0 = nodes[0]->info.node_rank == 0 ? nodes[0]->info : nodes[1]->info;
  bool shared = rank0.master_addr == "127.0.0.1";
  for (auto& n : nodes) {
    CHECK(n->info.use_agent_store == shared);
    if (shared) CHECK(n->info.master_port == 4321);
    CHECK(n->info.master_port == rank0.master_port);
  }
}

TEST_CASE("dynamic: the last call closes a round with min nodes", "[rendezvous]") {
  auto store = std::make_shared<HashStore>();
  auto nodes = join_all(store, std::vector<RendezvousOptions>(2, options("c10d", 2, 4)));
  for (auto& n : nodes) CHECK(n->info.num_nodes == 2);
}

TEST_CASE("a join timeout says how many nodes came", "[rendezvous]") {
  auto store = std::make_shared<HashStore>();
  auto o = options("static", 2, 2);
  o.join_timeout = 300ms;
  auto h = create_rendezvous_handler(o, [store] { return store; });
  CHECK_THROWS_WITH(h->next_rendezvous(), Catch::Contains("1 of 2 nodes joined"));
  auto d = options("c10d", 2, 3);
  d.join_timeout = 300ms;
  d.run_id = "dynamic";  // not the static job above: it counted itself into round 0
  auto h2 = create_rendezvous_handler(d, [store] { return store; });
  CHECK_THROWS_WITH(h2->next_rendezvous(), Catch::Contains("1 of at least 2 nodes joined"));
}

TEST_CASE("a restart request reaches every node with the failure", "[rendezvous]") {
  auto store = std::make_shared<HashStore>();
  auto nodes = join_all(store, std::vector<RendezvousOptions>(3, options("c10d", 3, 3)));
  watch_all(nodes);
  Failure failed;
  failed.rank = 4, failed.cause = FailureCause::kOom;
  nodes[1]->handler->request_restart(failed, false);
  for (auto& n : nodes) {
    auto e = event_of(*n);
    CHECK(e.kind == RoundEvent::Kind::kRestartRequested);
    REQUIRE(e.failure);
    CHECK(e.failure->rank == 4);
    CHECK(e.failure->cause == FailureCause::kOom);
  }
  auto recorded = nodes[0]->handler->failures();
  REQUIRE(recorded.size() == 1);
  CHECK(recorded[0].rank == 4);
  // Everyone moves on to the next round together.
  std::vector<std::thread> threads;
  for (auto& n : nodes) threads.emplace_back([&n] { n->info = n->handler->next_rendezvous(); });
  for (auto& t : threads) t.join();
  for (auto& n : nodes) CHECK(n->info.round == 1);
}

TEST_CASE("a hang's evidence: each node's share, read by every node as it comes", "[rendezvous]") {
  auto store = std::make_shared<EvidenceWaitWatch>(std::make_shared<HashStore>());
  auto nodes = join_all(store, std::vector<RendezvousOptions>(3, options("c10d", 3, 3)));
  auto by_rank = by_node_rank(nodes);
  by_rank[0]->publish_hang_evidence("zero");
  CHECK(by_rank[1]->hang_evidence(0ms) == std::vector<std::string>{"zero", "", ""});
  // A node that waits gets a share published meanwhile, and the rest when the time is up.
  auto read = std::async(std::launch::async, [&] { return by_rank[1]->hang_evidence(400ms); });
  REQUIRE(store->await_begun(1));
  by_rank[2]->publish_hang_evidence("two");
  auto start = std::chrono::steady_clock::now();
  CHECK(read.get() == std::vector<std::string>{"zero", "", "two"});
  CHECK(std::chrono::steady_clock::now() - start < 1s);
  by_rank[1]->publish_hang_evidence("one");
  auto all = std::async(std::launch::async, [&] { return by_rank[2]->hang_evidence(10s); });
  CHECK(all.wait_for(2s) == std::future_status::ready);  // all there: no waiting
  CHECK(all.get() == std::vector<std::string>{"zero", "one", "two"});
  CHECK(by_rank[0]->await_hang_evidence(10s));  // all there: at once
}

TEST_CASE("a hang's evidence: a node that waits for the others' without reading them", "[rendezvous]") {
  auto store = std::make_shared<EvidenceWaitWatch>(std::make_shared<HashStore>());
  auto nodes = join_all(store, std::vector<RendezvousOptions>(2, options("c10d", 2, 2)));
  auto by_rank = by_node_rank(nodes);
  by_rank[0]->publish_hang_evidence("zero");
  CHECK_FALSE(by_rank[0]->await_hang_evidence(0ms));
  auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(by_rank[0]->await_hang_evidence(200ms));  // node 1's never came: the time is up
  CHECK(std::chrono::steady_clock::now() - start >= 200ms);
  auto held = std::async(std::launch::async, [&] { return by_rank[0]->await_hang_evidence(10s); });
  REQUIRE(store->await_begun(2));  // the timed-out wait above was the first
  by_rank[1]->publish_hang_evidence("one");
  CHECK(held.wait_for(2s) == std::future_status::ready);  // released when the last one comes
  CHECK(held.get());
}

TEST_CASE("a node waiting for the others' hang evidence can still tell them to restart (a TCP store)",
          "[rendezvous]") {
  // A TCP client serves one call at a time: node 0's wait must not hold up its restart
  // request, which the other nodes wait for before they take their stacks and share them.
  StoreServer server(StoreServerOptions{});
  server.start();
  TcpStoreOptions tcp;
  tcp.port = server.port();
  tcp.connect_timeout = 10s;
  // A connection per handler, as agents have (and a second one for a handler's waits), each
  // saying when a wait for the evidence begins on it.
  auto begun = std::make_shared<EvidenceWaitWatch::Begun>();
  auto nodes = join_all(StoreConnector([tcp, begun] {
                          return std::make_shared<EvidenceWaitWatch>(std::make_shared<TcpStore>(tcp), begun);
                        }),
                        std::vector<RendezvousOptions>(2, options("c10d", 2, 2)));
  auto by_rank = by_node_rank(nodes);
  by_rank[0]->publish_hang_evidence("zero");
  auto held = std::async(std::launch::async, [&] { return by_rank[0]->await_hang_evidence(5s); });
  REQUIRE(begun->await(1));  // on whichever connection the wait was made
  auto start = std::chrono::steady_clock::now();
  Failure f;
  f.node_rank = 0, f.rank = 1, f.cause = FailureCause::kHang, f.message = "hang: rank 1";
  CHECK(by_rank[0]->request_restart(f, false));
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  by_rank[1]->publish_hang_evidence("one");
  CHECK(held.wait_for(3s) == std::future_status::ready);
  CHECK(held.get());
}

TEST_CASE("every node done ends the round with kAllDone", "[rendezvous]") {
  auto store = std::make_shared<HashStore>();
  auto nodes = join_all(store, std::vector<RendezvousOptions>(2, options("c10d", 2, 2)));
  watch_all(nodes);
  for (auto& n : nodes) n->handler->mark_done();
  for (auto& n : nodes) CHECK(event_of(*n).kind == RoundEvent::Kind::kAllDone);
}

// Each node is watched by the next node rank; node 0 by the last one.
TEST_CASE("a node that stops heartbeating is declared dead", "[rendezvous]") {
  int silent_rank = GENERATE(2, 0);
  auto store = std::make_shared<HashStore>();
  auto nodes = join_all(store, std::vector<RendezvousOptions>(3, options("c10d", 2, 3)));
  watch_all(nodes);
  Node* silent = nullptr;
  for (auto& n : nodes) if (n->info.node_rank == silent_rank) silent = n.get();
  REQUIRE(silent);
  silent->handler->shutdown();  // its heartbeats stop, as if it hung
  for (auto& n : nodes) {
    if (n.get() == silent) continue;
    auto e = event_of(*n);
    CHECK(e.kind == RoundEvent::Kind::kNodeDead);
    CHECK(e.node_rank == silent_rank);
    CHECK_THAT(e.detail, Catch::Contains("sent no heartbeat"));
  }
}

TEST_CASE("a closed rendezvous refuses new rounds", "[rendezvous]") {
  auto store = std::make_shared<HashStore>();
  auto nodes = join_all(store, std::vector<RendezvousOptions>(2, options("c10d", 2, 2)));
  watch_all(nodes);
  nodes[0]->handler->set_closed({"job failed on node 0", 0});
  for (auto& n : nodes) CHECK(event_of(*n).kind == RoundEvent::Kind::kClosed);
  CHECK_THROWS_AS(nodes[1]->handler->next_rendezvous(), ccrun::RendezvousClosedError);
}

TEST_CASE("dynamic: node ranks stay the same across a restart, whatever the join order",
          "[rendezvous]") {
  auto store = std::make_shared<HashStore>();
  std::vector<RendezvousOptions> opts;
  for (int i = 0; i < 3; ++i) {
    auto o = options("c10d", 3, 3);
    o.local_addr = "10.0.0." + std::to_string(i + 1);
    opts.push_back(o);
  }
  auto nodes = join_all(store, opts);
  std::map<std::string, int> first;  // address -> node rank
  for (auto& n : nodes) first[n->info.self.addr] = n->info.node_rank;
  REQUIRE(first.size() == 3);
  watch_all(nodes);
  nodes[0]->handler->request_restart(Failure{}, false);
  for (auto& n : nodes) event_of(*n);
  // Rejoin one by one, in the reverse order of the first ranks.
  std::vector<Node*> by_rank(3);
  for (auto& n : nodes) by_rank[n->info.node_rank] = n.get();
  std::vector<std::thread> threads;
  for (int r = 2; r >= 0; --r) {
    threads.emplace_back([n = by_rank[r]] { n->info = n->handler->next_rendezvous(); });
    std::this_thread::sleep_for(30ms);
  }
  for (auto& t : threads) t.join();
  for (auto& n : nodes) {
    CHECK(n->info.round == 1);
    CHECK(first[n->info.self.addr] == n->info.node_rank);
  }
  // Every node agrees on the master: node rank 0's address.
  for (auto& n : nodes) CHECK(n->info.master_addr == by_rank[0]->info.self.addr);
}

TEST_CASE("dynamic: a planner that died is replaced after the keep-alive window",
          "[rendezvous]") {
  auto store = std::make_shared<HashStore>();
  // An agent took join slot 0, published its NodeInfo and died.
  ccrun::JobKeys keys("test");
  store->add(keys.joined(0), 1);
  store->set(keys.node(0, 0), JoinedNode{"10.9.9.9", "gone", 1, 4242, -1}.to_json());
  auto nodes = join_all(store, std::vector<RendezvousOptions>(2, options("c10d", 3, 3)));
  for (auto& n : nodes) {
    CHECK(n->info.num_nodes == 3);
    CHECK(n->info.master_addr == "10.9.9.9");  // the plan is the one slot 0 would write
  }
  watch_all(nodes);
  for (auto& n : nodes) {
    auto e = event_of(*n);
    CHECK(e.kind == RoundEvent::Kind::kNodeDead);
    CHECK(e.node_rank == 0);
    CHECK_THAT(e.detail, Catch::Contains("10.9.9.9"));
  }
}

namespace {

// Starts next_rendezvous() on a thread of its own; the future holds its end.
std::future<RendezvousInfo> join_async(Node& n) {
  return std::async(std::launch::async, [&n] { return n.handler->next_rendezvous(); });
}

std::unique_ptr<Node> new_node(std::shared_ptr<Store> store, const RendezvousOptions& o) {
  auto n = std::make_unique<Node>();
  n->handler = create_rendezvous_handler(o, [store] { return store; });
  return n;
}

// A full job of two nodes (watched), and a third agent waiting as its hot
// spare; the job's rounds take `min_nodes` to `2`.
struct WithSpare {
  std::shared_ptr<HashStore> store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Node>> nodes;
  std::unique_ptr<Node> spare;
  std::future<RendezvousInfo> admitted;
};

WithSpare full_job_with_spare(int min_nodes) {
  WithSpare j;
  auto o = options("c10d", min_nodes, 2);
  o.last_call_timeout = 5s;  // a round that waited for it would show
  j.nodes = join_all(j.store, std::vector<RendezvousOptions>(2, o));
  watch_all(j.nodes);
  j.spare = new_node(j.store, o);
  j.admitted = join_async(*j.spare);
  // It waits: the round is full, and no join_timeout ends its wait.
  REQUIRE(j.admitted.wait_for(300ms) == std::future_status::timeout);
  return j;
}

}  // namespace

TEST_CASE("dynamic: a node at a full round waits as a hot spare and takes a leaving node's "
          "place", "[rendezvous][spare]") {
  WithSpare j = full_job_with_spare(1);
  auto& [store, nodes, spare, admitted] = j;
  CHECK(spare->handler->waiting_as_spare());
  CHECK(ccrun::read_job_state(*store, "test").spares.size() == 1);
  // Node 0 fails and leaves (it excludes itself): the spare is admitted.
  Node* leaving = nodes[0]->info.node_rank == 0 ? nodes[0].get() : nodes[1].get();
  Node* staying = leaving == nodes[0].get() ? nodes[1].get() : nodes[0].get();
  leaving->handler->request_restart(Failure{}, true);
  for (auto& n : nodes) CHECK(event_of(*n).kind == RoundEvent::Kind::kRestartRequested);
  auto began = std::chrono::steady_clock::now();
  staying->info = staying->handler->next_rendezvous();
  REQUIRE(admitted.wait_for(5s) == std::future_status::ready);
  spare->info = admitted.get();
  CHECK(std::chrono::steady_clock::now() - began < 3s);  // no last call: both were expected
  CHECK(staying->info.round == 1);
  CHECK(spare->info.round == 1);
  CHECK(staying->info.num_nodes == 2);
  CHECK(staying->info.node_rank == 0);  // survivors keep their ranks
  CHECK(spare->info.node_rank == 1);
  CHECK_FALSE(spare->handler->waiting_as_spare());
}

TEST_CASE("dynamic: a restart that every node rejoins keeps the spare waiting, and a finished "
          "job ends its wait", "[rendezvous][spare]") {
  WithSpare j = full_job_with_spare(1);
  auto& [store, nodes, spare, admitted] = j;
  nodes[1]->handler->request_restart(Failure{}, false);
  for (auto& n : nodes) event_of(*n);
  auto began = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (auto& n : nodes) threads.emplace_back([&n] { n->info = n->handler->next_rendezvous(); });
  for (auto& t : threads) t.join();
  CHECK(std::chrono::steady_clock::now() - began < 3s);  // closed at the survivors
  for (auto& n : nodes) CHECK(n->info.round == 1);
  CHECK(admitted.wait_for(300ms) == std::future_status::timeout);  // still a spare
  watch_all(nodes);
  for (auto& n : nodes) n->handler->mark_done();
  for (auto& n : nodes) CHECK(event_of(*n).kind == RoundEvent::Kind::kAllDone);
  REQUIRE(admitted.wait_for(5s) == std::future_status::ready);
  CHECK_THROWS_AS(admitted.get(), ccrun::JobFinishedError);
}

TEST_CASE("dynamic: a dead node's place goes to a spare", "[rendezvous][spare]") {
  WithSpare j = full_job_with_spare(2);
  auto& [store, nodes, spare, admitted] = j;
  nodes[0]->handler->shutdown();  // its heartbeats stop
  CHECK(event_of(*nodes[1]).kind == RoundEvent::Kind::kNodeDead);
  nodes[1]->info = nodes[1]->handler->next_rendezvous();
  REQUIRE(admitted.wait_for(5s) == std::future_status::ready);
  spare->info = admitted.get();
  CHECK(nodes[1]->info.num_nodes == 2);
  CHECK(spare->info.round == 1);
}

TEST_CASE("stand-by: an excluded node waits until its time, or until the job is over",
          "[rendezvous][exclusion]") {
  using End = RendezvousHandler::StandByEnd;
  auto store = std::make_shared<HashStore>();
  auto o = options("c10d", 1, 2);
  auto nodes = join_all(store, std::vector<RendezvousOptions>(2, o));
  watch_all(nodes);
  auto excluded = new_node(store, o);
  auto began = std::chrono::steady_clock::now();
  CHECK(excluded->handler->stand_by(ccrun::wall_clock_ms() + 200, false, 1s) == End::kTimeUp);
  CHECK(std::chrono::steady_clock::now() - began >= 150ms);
  auto waited = std::async(std::launch::async, [&] {
    return excluded->handler->stand_by(ccrun::wall_clock_ms() + 60'000, false, 1s);
  });
  // A restart does not end its wait; the job's success does.
  nodes[1]->handler->request_restart(Failure{}, false);
  for (auto& n : nodes) event_of(*n);
  CHECK(waited.wait_for(300ms) == std::future_status::timeout);
  std::vector<std::thread> threads;
  for (auto& n : nodes) threads.emplace_back([&n] { n->info = n->handler->next_rendezvous(); });
  for (auto& t : threads) t.join();
  watch_all(nodes);
  for (auto& n : nodes) n->handler->mark_done();
  REQUIRE(waited.wait_for(5s) == std::future_status::ready);
  CHECK(waited.get() == End::kFinished);
  // Another job, closed while a node stands by (which came while it ran: its
  // first stand-by ended before the close).
  auto store2 = std::make_shared<HashStore>();
  auto nodes2 = join_all(store2, std::vector<RendezvousOptions>(2, o));
  auto closed = new_node(store2, o);
  CHECK(closed->handler->stand_by(ccrun::wall_clock_ms(), false, 1s) == End::kTimeUp);
  nodes2[0]->handler->set_closed({"failed", 0});
  CHECK(closed->handler->stand_by(ccrun::wall_clock_ms() + 60'000, false, 1s) == End::kClosed);
}

// A store that outlives its jobs (ccrun-rendezvous, etcd) still holds a
// finished run's keys when the same command runs again. Its end is not the
// newcomer's: it starts nothing, and says how and when that run ended.
TEST_CASE("a node that arrives after the id's run ended is refused, told how that run ended",
          "[rendezvous][finished_run]") {
  auto store = std::make_shared<HashStore>();
  auto o = options("c10d", 2, 2);
  o.forget_hint = "wait until the store forgets it";
  auto nodes = join_all(store, std::vector<RendezvousOptions>(2, o));
  watch_all(nodes);
  bool succeeded = GENERATE(true, false);
  if (succeeded) {
    for (auto& n : nodes) n->handler->mark_done();
  } else {
    nodes[0]->handler->set_closed({"no restarts left (--max-restarts 0)", 0});
  }
  for (auto& n : nodes) event_of(*n);
  std::string said;
  try {
    (void)new_node(store, o)->handler->next_rendezvous();
  } catch (const ccrun::JobAlreadyRanError& e) {
    said = e.what();
  }
  CHECK_THAT(said, Catch::Contains("the job id 'test' already ran on this store"));
  CHECK_THAT(said, Catch::Contains("its previous run ended "));
  CHECK_THAT(said, Catch::Contains(" UTC) and "));  // when: the record's time
  CHECK_THAT(said, Catch::Contains("nothing was started here"));
  CHECK_THAT(said, Catch::Contains("use a new --rdzv-id, or wait until the store forgets it"));
  if (succeeded) {
    CHECK_THAT(said, Catch::Contains(" and succeeded;"));
  } else {
    CHECK_THAT(said, Catch::Contains(
                         " and failed (the previous run's reason: no restarts left (--max-restarts 0))"));
  }
  // Nothing joined: the old run's records are as they were.
  CHECK(store->add(ccrun::JobKeys("test").joined(0), 0) == 2);
  // An excluded node that arrives then is refused too, instead of standing by.
  CHECK_THROWS_AS(new_node(store, o)->handler->stand_by(ccrun::wall_clock_ms() + 60'000, false, 1s),
                  ccrun::JobAlreadyRanError);
}
