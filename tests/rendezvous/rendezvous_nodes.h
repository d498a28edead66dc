// Rendezvous tests' agents: handlers as threads over one in-process store,
// joined together, and the first event each one's watcher delivers.
#pragma once

#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ccrun/prefix_store.h"
#include "ccrun/rendezvous.h"
#include "ccrun/store.h"

namespace ccrun::rendezvous::testing {

using namespace std::chrono_literals;

inline RendezvousOptions options(const std::string& backend, int min, int max) {
  RendezvousOptions o;
  o.run_id = "test";
  o.backend = parse_backend(backend);
  o.min_nodes = min;
  o.max_nodes = max;
  o.join_timeout = 10s;
  o.last_call_timeout = 200ms;
  o.keep_alive_interval = 50ms;
  o.keep_alive_max_attempt = 3;
  o.master_addr = "10.0.0.1";
  o.master_port = 29500;
  return o;
}

struct Node {
  // Before the handler: members go in reverse order, so the handler (and its
  // watch's thread, which sets this promise) goes first.
  std::promise<RoundEvent> event;
  std::unique_ptr<RendezvousHandler> handler;
  RendezvousInfo info;
};

// Starts n handlers, each with its store from `connect`, joins them all
// concurrently.
inline std::vector<std::unique_ptr<Node>> join_all(StoreConnector connect, std::vector<RendezvousOptions> opts) {
  std::vector<std::unique_ptr<Node>> nodes;
  for (auto& o : opts) {
    auto n = std::make_unique<Node>();
    n->handler = create_rendezvous_handler(o, connect);
    nodes.push_back(std::move(n));
  }
  // spdlog's registry is made at its first use; made here, before the
  // threads, so that ThreadSanitizer does not see two threads race to make it
  // inside the uninstrumented library.
  (void)spdlog::default_logger_raw();
  std::vector<std::thread> threads;
  for (auto& n : nodes) {
    threads.emplace_back([&n] { n->info = n->handler->next_rendezvous(); });
  }
  for (auto& t : threads) t.join();
  return nodes;
}

// The same, every handler on one in-process store.
inline std::vector<std::unique_ptr<Node>> join_all(std::shared_ptr<store::Store> store,
                                            std::vector<RendezvousOptions> opts) {
  return join_all(StoreConnector([store] { return store; }), std::move(opts));
}

// A store that says when a wait for a hang's evidence begins on it, so that a
// test acts while that wait is under way instead of sleeping first. (The
// store's own wait follows within microseconds: a test acting at once can
// only miss the case it looks for, never fail a correct build.)
// Several connections may share one count (`begun`).
class EvidenceWaitWatch : public store::PrefixStore {
 public:
  struct Begun {
    std::mutex mu;
    std::condition_variable cv;
    int waits = 0;
    // Blocks until `n` waits have begun in all; false after `limit`.
    bool await(int n, std::chrono::milliseconds limit = 10s) {
      std::unique_lock lock(mu);
      return cv.wait_for(lock, limit, [&] { return waits >= n; });
    }
  };

  explicit EvidenceWaitWatch(std::shared_ptr<store::Store> inner,
                             std::shared_ptr<Begun> begun = std::make_shared<Begun>())
      : PrefixStore("", std::move(inner)), begun_(std::move(begun)) {}
  using PrefixStore::wait;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    if (!keys.empty() && keys[0].find("/hang_evidence/") != std::string::npos) {
      std::lock_guard lock(begun_->mu);
      ++begun_->waits;
      begun_->cv.notify_all();
    }
    PrefixStore::wait(keys, timeout);
  }
  bool await_begun(int n) { return begun_->await(n); }

 private:
  std::shared_ptr<Begun> begun_;
};

// Each node's handler by its node rank.
inline std::map<int, RendezvousHandler*> by_node_rank(const std::vector<std::unique_ptr<Node>>& nodes) {
  std::map<int, RendezvousHandler*> out;
  for (const auto& n : nodes) out[n->info.node_rank] = n->handler.get();
  return out;
}

inline void watch_all(std::vector<std::unique_ptr<Node>>& nodes) {
  for (auto& n : nodes) {
    n->event = std::promise<RoundEvent>();
    n->handler->watch([p = &n->event](const RoundEvent& e) { p->set_value(e); });
  }
}

inline RoundEvent event_of(Node& n) {
  auto f = n.event.get_future();
  REQUIRE(f.wait_for(10s) == std::future_status::ready);
  return f.get();
}

}  // namespace ccrun::rendezvous::testing
