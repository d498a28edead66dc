// rdzv_scale_sim: N agents' real rendezvous and heartbeat code (the
// RendezvousHandler the agent uses), many to this one process as threads,
// each with its own store connections, against a real store over real TCP
// (ccrun-rendezvous, or etcd). It measures what scripts/bench-scale.sh
// tabulates (docs/benchmarks.md):
//   form      time from every agent calling next_rendezvous() to the last
//             one returning (a round of N nodes);
//   steady    the store's load over --steady seconds of watching: requests
//             and payload bytes per second (counted in the clients) and,
//             with --daemon-pid, the daemon's CPU and RSS (/proc/<pid>);
//   detect    one agent stops heart-beating (as if it hung or its host
//             died): time until every other agent got kNodeDead;
//   watched   with --watch: the same load while a reader (`ccrun top`'s
//             lease, ccrun/watch_lease.h, at a 1 s refresh on a connection
//             not counted) watches, and again once its lease expired;
//   restart   time for the N - 1 survivors to form the next round.
// Prints one JSON object. What it does not stand in for: network latency
// between hosts, process start-up, a node's other load (docs/rendezvous.md).
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include "ccrun/error.h"
#include "ccrun/rendezvous.h"
#include "ccrun/job_keys.h"
#include "ccrun/store_address.h"
#include "ccrun/watch_lease.h"

namespace {

using namespace ccrun;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Every request an agent's connections make, counted, with its payload:
// the keys and values sent and the values received (the TCPStore framing,
// a few bytes a field, is left out).
std::atomic<int64_t> g_requests{0};
std::atomic<int64_t> g_bytes{0};

int64_t size_of(const std::vector<std::string>& v) {
  int64_t n = 0;
  for (const auto& s : v) n += int64_t(s.size());
  return n;
}

class CountingStore : public store::Store {
 public:
  explicit CountingStore(std::shared_ptr<store::Store> s) : s_(std::move(s)) {}
  void set(const std::string& k, const std::string& v) override {
    count(k.size() + v.size());
    s_->set(k, v);
  }
  std::string get(const std::string& k) override { return received(k.size(), s_->get(k)); }
  int64_t add(const std::string& k, int64_t d) override {
    count(k.size() + 16);
    return s_->add(k, d);
  }
  std::string compare_set(const std::string& k, const std::string& e,
                          const std::string& d) override {
    return received(k.size() + e.size() + d.size(), s_->compare_set(k, e, d));
  }
  bool check(const std::vector<std::string>& ks) override {
    count(size_t(size_of(ks)));
    return s_->check(ks);
  }
  void wait(const std::vector<std::string>& ks, milliseconds t) override {
    count(size_t(size_of(ks)));
    s_->wait(ks, t);
  }
  bool delete_key(const std::string& k) override {
    count(k.size());
    return s_->delete_key(k);
  }
  int64_t num_keys() override {
    count(0);
    return s_->num_keys();
  }
  void append(const std::string& k, const std::string& v) override {
    count(k.size() + v.size());
    s_->append(k, v);
  }
  std::vector<std::string> multi_get(const std::vector<std::string>& ks) override {
    count(size_t(size_of(ks)));
    auto values = s_->multi_get(ks);
    g_bytes += size_of(values);
    return values;
  }
  void multi_set(const std::vector<std::string>& ks, const std::vector<std::string>& vs) override {
    count(size_t(size_of(ks) + size_of(vs)));
    s_->multi_set(ks, vs);
  }

 private:
  static void count(size_t bytes) {
    ++g_requests;
    g_bytes += int64_t(bytes);
  }
  static std::string received(size_t sent, std::string value) {
    count(sent + value.size());
    return value;
  }
  std::shared_ptr<store::Store> s_;
};

struct Options {
  std::string store;
  int nodes = 100;
  double keep_alive_s = 1;
  int max_attempt = 3;
  double steady_s = 5;
  int daemon_pid = 0;
  int daemon_port = 0;  // also count the bytes through this port (ss)
  std::string run_id;
  bool watch = false;   // also measure a watched job, and one whose lease expired
};

// Bytes through the established connections whose local port is `port`,
// as ss counts them (bytes_received + bytes_acked), framing included.
int64_t port_bytes(int port) {
  std::string cmd = "ss -tinH state established '( sport = :" + std::to_string(port) + " )'";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return 0;
  int64_t total = 0;
  char word[256];
  while (std::fscanf(p, "%255s", word) == 1) {
    std::string w = word;
    for (const char* name : {"bytes_received:", "bytes_acked:"}) {
      if (w.rfind(name, 0) == 0) total += std::stoll(w.substr(std::strlen(name)));
    }
  }
  pclose(p);
  return total;
}

// The daemon's counters: CPU seconds, RSS.
struct DaemonSample {
  double cpu_s = 0;
  int64_t rss_kb = 0;
};

DaemonSample sample_daemon(int pid) {
  DaemonSample d;
  if (pid <= 0) return d;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::vector<std::string> f{std::istream_iterator<std::string>(rest), {}};
  if (f.size() > 13) d.cpu_s = double(std::stoll(f[11]) + std::stoll(f[12])) / double(sysconf(_SC_CLK_TCK));
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string l; std::getline(status, l);) {
    if (l.rfind("VmRSS:", 0) == 0) d.rss_kb = std::stoll(l.substr(6));
  }
  return d;
}

struct Agent {
  std::unique_ptr<rendezvous::RendezvousHandler> handler;
  rendezvous::RendezvousInfo info;
  std::promise<std::pair<rendezvous::RoundEvent, Clock::time_point>> event;
};

rendezvous::RendezvousOptions agent_options(const Options& o, int n) {
  rendezvous::RendezvousOptions r;
  r.run_id = o.run_id;
  r.backend = rendezvous::Backend::kC10d;
  r.min_nodes = n;  // elastic: the survivors of a death form the next round
  r.max_nodes = o.nodes;
  r.local_world_size = 8;
  r.local_addr = "127.0.0.1";
  r.join_timeout = milliseconds(600'000);
  // The first round closes when all N joined, a restart round when the
  // survivors did: no last call cuts either short.
  r.last_call_timeout = milliseconds(600'000);
  r.keep_alive_interval = milliseconds(int64_t(o.keep_alive_s * 1000));
  r.keep_alive_max_attempt = o.max_attempt;
  return r;
}

// Every agent in `agents` joins its next round at once; the seconds until
// the last one has.
double form(std::vector<std::unique_ptr<Agent>>& agents) {
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  std::mutex mu;
  std::string error;
  for (auto& a : agents) {
    threads.emplace_back([&a, &mu, &error] {
      try {
        a->info = a->handler->next_rendezvous();
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!error.empty()) throw std::runtime_error("an agent failed to join: " + error);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void watch(std::vector<std::unique_ptr<Agent>>& agents) {
  for (auto& a : agents) {
    a->event = {};
    a->handler->watch([p = &a->event](const rendezvous::RoundEvent& e) {
      p->set_value({e, Clock::now()});
    });
  }
}

nlohmann::json steady(const Options& o, double seconds) {
  int64_t req0 = g_requests, bytes0 = g_bytes;
  int64_t port0 = o.daemon_port ? port_bytes(o.daemon_port) : 0;
  DaemonSample d0 = sample_daemon(o.daemon_pid);
  auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  DaemonSample d1 = sample_daemon(o.daemon_pid);
  double per_interval = o.keep_alive_s / dt / o.nodes;
  nlohmann::json j{{"requests_per_s", double(g_requests - req0) / dt},
                   {"requests_per_node_per_interval", double(g_requests - req0) * per_interval},
                   {"bytes_per_s", double(g_bytes - bytes0) / dt},
                   {"bytes_per_node_per_s", double(g_bytes - bytes0) / dt / o.nodes}};
  if (o.daemon_port > 0) {
    j["wire_bytes_per_node_per_s"] = double(port_bytes(o.daemon_port) - port0) / dt / o.nodes;
  }
  if (o.daemon_pid > 0) {
    j["daemon_cpu_percent"] = 100.0 * (d1.cpu_s - d0.cpu_s) / dt;
    j["daemon_rss_mib"] = double(d1.rss_kb) / 1024.0;
  }
  return j;
}

// The steady load while a reader renews its lease every second, then once
// the lease expired.
void watched(const Options& o, nlohmann::json& out) {
  auto s = store::open_store(o.store);
  int round = std::stoi(s->get(JobKeys(o.run_id).current_round()));
  WatchLeaseWriter lease(o.run_id, "rdzv_scale_sim", milliseconds(1'000));
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop) {
      lease.renew(*s, round, wall_clock_ms());
      std::this_thread::sleep_for(milliseconds(1'000));
    }
  });
  std::this_thread::sleep_for(milliseconds(1'500));  // every node woken and publishing
  out["watched"] = steady(o, o.steady_s);
  stop = true;
  reader.join();
  // Expired within lease_expiry_ms(1 s) of the last renewal, and the beat
  // schedule back by the next interval.
  std::this_thread::sleep_for(milliseconds(lease_expiry_ms(1'000)) +
                              std::chrono::duration<double>(o.keep_alive_s) + milliseconds(1'000));
  out["after_watch"] = steady(o, o.steady_s);
}

// One agent stops heart-beating; seconds until every other agent heard.
double detect(std::vector<std::unique_ptr<Agent>>& agents, size_t victim) {
  auto t0 = Clock::now();
  agents[victim]->handler->shutdown();
  auto last = t0;
  for (size_t i = 0; i < agents.size(); ++i) {
    if (i == victim) continue;
    auto f = agents[i]->event.get_future();
    auto [e, when] = f.get();
    if (e.kind != RoundEndKind::kNodeDead) {
      throw std::runtime_error("agent " + std::to_string(i) + " saw " +
                               std::string(to_string(e.kind)) + ": " + e.detail);
    }
    last = std::max(last, when);
  }
  return std::chrono::duration<double>(last - t0).count();
}

void raise_fd_limit() {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = r.rlim_max;
  setrlimit(RLIMIT_NOFILE, &r);
}

int run(const Options& o) {
  raise_fd_limit();
  spdlog::set_level(spdlog::level::warn);  // N agents' progress lines say nothing here
  std::vector<std::unique_ptr<Agent>> agents;
  for (int i = 0; i < o.nodes; ++i) {
    auto a = std::make_unique<Agent>();
    std::string address = o.store;
    a->handler = rendezvous::create_rendezvous_handler(agent_options(o, o.nodes / 2), [address] {
      return std::make_shared<CountingStore>(store::open_store(address));
    });
    agents.push_back(std::move(a));
  }
  int64_t req0 = g_requests, bytes0 = g_bytes;
  nlohmann::json out{{"nodes", o.nodes}, {"keep_alive_s", o.keep_alive_s}};
  out["form_s"] = form(agents);
  out["form_requests_per_node"] = double(g_requests - req0) / o.nodes;
  out["form_bytes_per_node"] = double(g_bytes - bytes0) / o.nodes;
  watch(agents);
  // One interval first: every watch's first beat (at once) is start-up,
  // not the steady state.
  std::this_thread::sleep_for(std::chrono::duration<double>(o.keep_alive_s));
  out["steady"] = steady(o, o.steady_s);
  if (o.watch) watched(o, out);
  size_t victim = agents.size() / 2;
  out["detect_s"] = detect(agents, victim);
  out["detect_bound_s"] = o.keep_alive_s * o.max_attempt + 1;  // the window + 1 s
  agents.erase(agents.begin() + long(victim));
  req0 = g_requests;
  out["restart_s"] = form(agents);
  out["restart_requests_per_node"] = double(g_requests - req0) / double(agents.size());
  if (o.daemon_pid > 0) out["daemon_rss_mib"] = double(sample_daemon(o.daemon_pid).rss_kb) / 1024.0;
  for (auto& a : agents) a->handler->shutdown();
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("N rendezvous agents as threads against one store; prints the measurements as JSON");
  Options o;
  o.run_id = "scale-" + std::to_string(getpid());
  app.add_option("--store", o.store, "the store address (tcp://host:port, etcd://host:port)")
      ->required();
  app.add_option("--nodes", o.nodes, "agents")->check(CLI::Range(2, 1'000'000));
  app.add_option("--keep-alive", o.keep_alive_s, "keep_alive_interval, seconds");
  app.add_option("--max-attempt", o.max_attempt, "keep_alive_max_attempt");
  app.add_option("--steady", o.steady_s, "seconds of steady state to measure");
  app.add_option("--daemon-pid", o.daemon_pid, "the store daemon's pid, for its bytes, CPU, RSS");
  app.add_option("--daemon-port", o.daemon_port,
                 "the store's port, to count the bytes through it (ss) too");
  app.add_option("--run-id", o.run_id, "the job's run id");
  app.add_flag("--watch", o.watch, "also measure the load while a reader watches, and after");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdzv_scale_sim: %s\n", e.what());
    return 1;
  }
}
