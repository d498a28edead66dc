// A reader's lease on a job's live status (ccrun/watch_lease.h): the pure
// rules of a node's view of the lease, and the round watches of real
// handlers over one store: a reader's lease makes every node publish its
// status between heartbeats, and a round's end still reaches every node
// after watch sessions moved the key they wait on.
#include "ccrun/watch_lease.h"

#include "ccrun/hash_store.h"
#include "rendezvous_nodes.h"

namespace ccrun::rendezvous::testing {
namespace {

// Each node's status record as the store holds it now ("" before its first).
std::vector<std::string> statuses(store::Store& s, int round, int nodes) {
  std::vector<std::string> out;
  for (int i = 0; i < nodes; ++i) {
    std::string key = JobKeys("test").status(round, i);
    out.push_back(s.check({key}) ? s.get(key) : "");
  }
  return out;
}

// Renews `lease` every 100 ms until every node's status record differs
// from `before` or `limit` passed; true when all changed.
bool all_republished(store::Store& s, WatchLeaseWriter& lease, int round,
                     const std::vector<std::string>& before, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    lease.renew(s, round, wall_clock_ms());
    auto now = statuses(s, round, int(before.size()));
    bool all = true;
    for (size_t i = 0; i < now.size(); ++i) all = all && now[i] != before[i];
    if (all) return true;
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

}  // namespace

TEST_CASE("a lease lives while its value changes, and expires after three refreshes", "[watch]") {
  LeaseTracker t;
  CHECK_FALSE(t.live(0));  // never watched
  WatchLease l;
  l.refresh_ms = 2'000, l.seq = 1;
  t.observe(l.to_json(), 1'000);
  CHECK(t.live(1'000));
  CHECK(t.live(1'000 + 6'000));
  CHECK_FALSE(t.live(1'000 + 6'001));  // 3 x 2 s without a change
  t.observe(l.to_json(), 5'000);       // the same value again: no renewal
  CHECK_FALSE(t.live(7'001 + 100));
  l.seq = 2;
  t.observe(l.to_json(), 8'000);
  CHECK(t.live(8'000 + 6'000));
  t.observe("", 9'000);  // an unreadable read changes nothing
  CHECK(t.live(9'000));
}

TEST_CASE("a watched node publishes at the reader's refresh, within its sample rate and beat",
          "[watch]") {
  LeaseTracker t;
  WatchLease l;
  auto every = [&](int64_t refresh, int64_t beat) {
    l.refresh_ms = refresh, ++l.seq;
    t.observe(l.to_json(), l.seq);
    return t.publish_every_ms(beat);
  };
  CHECK(every(1'000, 5'000) == 1'000);
  CHECK(every(2'500, 5'000) == 2'500);
  CHECK(every(100, 5'000) == kMinWatchedPublish.count());  // faster than the samples
  CHECK(every(30'000, 5'000) == 5'000);                     // slower than the beats
  CHECK(every(500, 200) == kMinWatchedPublish.count());
  CHECK(lease_expiry_ms(100) == 3'000);
  CHECK(lease_expiry_ms(2'000) == 6'000);
}

TEST_CASE("a lease's record reads back, and a damaged one reads as the defaults", "[watch]") {
  WatchLease l;
  l.refresh_ms = 250, l.reader = "host:12", l.seq = 7;
  WatchLease back = WatchLease::from_json(l.to_json());
  CHECK(back.refresh_ms == 250);
  CHECK(back.reader == "host:12");
  CHECK(back.seq == 7);
  CHECK(WatchLease::from_json("{").refresh_ms == 1'000);
  CHECK(WatchLease::from_json(R"({"refresh_ms": "x"})").refresh_ms == 1'000);
  CHECK(WatchLease::from_json(R"({"refresh_ms": -5})").refresh_ms == 1);
}

TEST_CASE("a reader's lease makes every node publish between its heartbeats", "[watch]") {
  auto store = std::make_shared<store::HashStore>();
  auto opts = std::vector<RendezvousOptions>(3, options("c10d", 3, 3));
  for (auto& o : opts) o.keep_alive_interval = 60s;  // no beat but the first during the test
  auto nodes = join_all(store, opts);
  watch_all(nodes);
  int round = nodes[0]->info.round;
  // Each node's first beat, at once.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  std::vector<std::string> first;
  do {
    std::this_thread::sleep_for(20ms);
    first = statuses(*store, round, 3);
  } while (std::count(first.begin(), first.end(), "") > 0 &&
           std::chrono::steady_clock::now() < deadline);
  REQUIRE(std::count(first.begin(), first.end(), "") == 0);

  WatchLeaseWriter lease("test", "reader:1", 1s);
  CHECK(all_republished(*store, lease, round, first, 10s));
  // Watched, each node publishes again at the lease's rate.
  CHECK(all_republished(*store, lease, round, statuses(*store, round, 3), 10s));

  // The round's end reaches every node though the sessions moved the key
  // each waits on.
  Failure failed;
  failed.rank = 1;
  nodes[2]->handler->request_restart(failed, false);
  for (auto& n : nodes) CHECK(event_of(*n).kind == RoundEvent::Kind::kRestartRequested);
}

TEST_CASE("a round's end reaches a node that waits on a later watch session's key", "[watch]") {
  auto store = std::make_shared<store::HashStore>();
  auto opts = std::vector<RendezvousOptions>(2, options("c10d", 2, 2));
  for (auto& o : opts) o.keep_alive_interval = 60s;
  auto nodes = join_all(store, opts);
  watch_all(nodes);
  int round = nodes[0]->info.round;
  // Three readers, one after the other: the watches wait on wake/3 by now,
  // or on an earlier key already set (they wake and move on).
  for (int i = 0; i < 3; ++i) {
    WatchLeaseWriter lease("test", "reader:" + std::to_string(i), 1s);
    lease.renew(*store, round, wall_clock_ms());
  }
  Failure failed;
  failed.rank = 0;
  nodes[0]->handler->request_restart(failed, false);
  for (auto& n : nodes) CHECK(event_of(*n).kind == RoundEvent::Kind::kRestartRequested);
  CHECK(store->check({JobKeys("test").wake(round, 3)}));
}

}  // namespace ccrun::rendezvous::testing
