// store_rendezvous_bench: the store traffic of one rendezvous, timed. N
// clients (threads, each with its own Store and connections, as N agents
// would have) each add 1 to a counter, set their own key and wait for all N
// keys; the time is from the start signal to the last client's return. Any
// store open_store() opens: etcd://, tcp://, file://.
//
//   store_rendezvous_bench --address etcd://127.0.0.1:2379 --clients 64 --rounds 5
//
// Prints one JSON line: connect time of all clients, and the rendezvous
// time of every round (each round under fresh keys) with its median; on
// stderr, when the last add, set and wait of each round finished.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "ccrun/store_address.h"

using namespace ccrun::store;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Starts `n` threads at one signal and waits for all of them.
class Gate {
 public:
  void open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void pass() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times the store traffic of an N-agent rendezvous"};
  std::string address;
  int clients = 64, rounds = 5;
  bool no_add = false;
  app.add_option("--address", address, "store address (etcd://, tcp://, file://)")->required();
  app.add_option("--clients", clients, "clients (agents)")->check(CLI::Range(1, 100000));
  app.add_option("--rounds", rounds, "rendezvous rounds, each under fresh keys")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--no-add", no_add, "leave out the shared counter (set and wait only)");
  CLI11_PARSE(app, argc, argv);

  OpenStoreOptions o;
  o.timeout = std::chrono::seconds(60);
  o.connect_timeout = std::chrono::seconds(30);
  std::vector<std::shared_ptr<Store>> stores(static_cast<size_t>(clients));
  auto t0 = Clock::now();
  {
    std::atomic<int> failed{0};
    std::vector<std::thread> openers;
    for (int i = 0; i < clients; ++i) {
      openers.emplace_back([&, i] {
        try {
          stores[static_cast<size_t>(i)] = open_store(address, o);
        } catch (const std::exception& e) {
          if (failed++ == 0) std::fprintf(stderr, "store_rendezvous_bench: %s\n", e.what());
        }
      });
    }
    for (auto& t : openers) t.join();
    if (failed) return 1;
  }
  double connect_ms = ms_since(t0);

  const std::string run = std::to_string(::getpid());
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    const std::string base = "bench/" + run + "/" + std::to_string(r) + "/";
    std::vector<std::string> keys;
    for (int i = 0; i < clients; ++i) keys.push_back(base + "ready/" + std::to_string(i));
    Gate gate;
    Clock::time_point start;  // written before the gate opens
    std::atomic<int> failures{0};
    std::vector<double> added(static_cast<size_t>(clients)), was_set(added), woke(added);
    std::vector<std::thread> agents;
    for (int i = 0; i < clients; ++i) {
      agents.emplace_back([&, i] {
        gate.pass();
        try {
          auto& s = *stores[static_cast<size_t>(i)];
          if (!no_add) s.add(base + "arrived", 1);
          added[static_cast<size_t>(i)] = ms_since(start);
          s.set(keys[static_cast<size_t>(i)], std::to_string(i));
          was_set[static_cast<size_t>(i)] = ms_since(start);
          s.wait(keys);
          woke[static_cast<size_t>(i)] = ms_since(start);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "client %d: %s\n", i, e.what());
          ++failures;
        }
      });
    }
    start = Clock::now();
    gate.open();
    for (auto& t : agents) t.join();
    times.push_back(ms_since(start));
    std::fprintf(stderr, "round %d: last add done %.1f ms, last set %.1f ms, last wait %.1f ms\n", r,
                 *std::max_element(added.begin(), added.end()),
                 *std::max_element(was_set.begin(), was_set.end()),
                 *std::max_element(woke.begin(), woke.end()));
    if (failures) {
      std::fprintf(stderr, "store_rendezvous_bench: %d clients failed\n", failures.load());
      return 1;
    }
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  std::string list;
  for (double t : times) list += (list.empty() ? "" : ", ") + std::to_string(t);
  std::printf(
      "{\"address\": \"%s\", \"clients\": %d, \"connect_ms\": %.1f, \"rendezvous_ms\": [%s], "
      "\"median_ms\": %.1f}\n",
      address.c_str(), clients, connect_ms, list.c_str(), sorted[sorted.size() / 2]);
  return 0;
}
