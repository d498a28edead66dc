// The usage examples of the public headers (include/ccrun/*.h), compiled.
// Each block between "// example: <header>" and "// end" holds lines of that
// header's opening comment, word for word (tests/docs/test_docs.py checks
// that they still are, and that every header with an example has a block);
// the lines around a block only declare what the example takes as given.
// Built as an object library: compiled with every build, never run.
#include <signal.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ccrun/collectives.h"
#include "ccrun/console_collapse.h"
#include "ccrun/console_frame.h"
#include "ccrun/endpoint.h"
#include "ccrun/error.h"
#include "ccrun/etcd_store.h"
#include "ccrun/file_store.h"
#include "ccrun/hash_store.h"
#include "ccrun/host_name.h"
#include "ccrun/job_keys.h"
#include "ccrun/job_store_env.h"
#include "ccrun/exclusion.h"
#include "ccrun/job_state.h"
#include "ccrun/finished_run.h"
#include "ccrun/prefix_store.h"
#include "ccrun/rank_progress.h"
#include "ccrun/event_log_handler.h"
#include "ccrun/name_table.h"
#include "ccrun/numa_binding.h"
#include "ccrun/numa_plan.h"
#include "ccrun/numa_topology.h"
#include "ccrun/rendezvous_backend.h"
#include "ccrun/signal_names.h"
#include "ccrun/store.h"
#include "ccrun/store_address.h"
#include "ccrun/store_interrupt.h"
#include "ccrun/store_server.h"
#include "ccrun/tcp_store.h"
#include "ccrun/token_file.h"
#include "ccrun/watch_lease.h"

namespace ccrun::docs_examples {
using namespace ccrun::store;

void store_h() {
  // example: ccrun/store.h
  std::shared_ptr<Store> store = open_store("tcp://10.0.0.1:29400");  // store_address.h
  store->set("rank0/addr", "10.0.0.1:5000");
  std::string peer = store->get("rank1/addr");   // blocks until set
  int64_t arrived = store->add("barrier", 1);    // atomic counter
  // end
  (void)peer, (void)arrived;
}

void store_address_h() {
  // example: ccrun/store_address.h
  OpenStoreOptions o;
  o.conf = {{"etcd_user", "job"}, {"etcd_password", "..."}};   // --rdzv-conf
  std::shared_ptr<Store> s = open_store("etcd://10.0.0.1:2379,10.0.0.2:2379/ccrun/job7", o);
  // end
}

void job_store_env_h(const OpenStoreOptions& options) {
  // example: ccrun/job_store_env.h
  if (auto js = ccrun::worker_env::job_store()) {
    auto tcp = store::open_store(store::tcp_address(js->endpoint), options);
    auto mine = std::make_shared<store::PrefixStore>(js->collectives_prefix(), tcp);
  }
  // end
}

void endpoint_h() {
  // example: ccrun/endpoint.h
  Endpoint ep = parse_endpoint("[::1]:29400", 29400);
  std::string text = ep.to_string();                  // "[::1]:29400"
  std::string v4 = format_host_port("10.0.0.1", 80);  // "10.0.0.1:80"
  // end
}

void tcp_store_h() {
  // example: ccrun/tcp_store.h
  TcpStoreOptions opts;
  opts.host = "10.0.0.1";
  opts.port = 29400;
  TcpStore store(opts);      // connects, retrying until connect_timeout
  store.set("k", "v");
  // end
}

void store_server_h() {
  // example: ccrun/store_server.h
  StoreServerOptions opts;
  opts.host = "0.0.0.0";
  opts.port = 29400;                  // 0 = any free port
  StoreServer server(opts);
  server.start();                     // binds; serves on its own thread
  std::cout << server.port();
  server.stop();                      // closes every connection, joins
  // end
}

void store_interrupt_h(TcpStoreOptions& opts) {
  // example: ccrun/store_interrupt.h
  auto interrupt = std::make_shared<StoreInterrupt>();
  opts.interrupt = interrupt;            // TcpStoreOptions
  interrupt->trigger();                  // that wait throws InterruptedError
  interrupt->reset();                    // the stores are usable again
  // end
}

void etcd_store_h() {
  // example: ccrun/etcd_store.h
  EtcdStoreOptions opts;
  opts.endpoints = {{"10.0.0.1", 2379}, {"10.0.0.2", 2379}, {"10.0.0.3", 2379}};
  opts.prefix = "ccrun/job7/";
  EtcdStore store(opts);
  store.add("arrived", 1);               // a transaction, exactly once
  store.wait({"ready/0", "ready/1"});    // a watch, no polling
  // end
}

void file_store_h() {
  // example: ccrun/file_store.h
  FileStore store("/shared/job7.store");
  store.add("arrived", 1);
  // end
}

void hash_store_h() {
  // example: ccrun/hash_store.h
  auto store = std::make_shared<HashStore>();
  std::thread t([&] { store->set("k", "v"); });
  std::string v = store->get("k");   // blocks until the thread has set it
  // end
  t.join();
}

void prefix_store_h(std::shared_ptr<Store> store, const std::string& addr) {
  // example: ccrun/prefix_store.h
  auto attempt = std::make_shared<PrefixStore>("ccrun/job7/attempt_1", store);
  attempt->set("rank0", addr);          // stored as "ccrun/job7/attempt_1/rank0"
  // end
}

void token_file_h() {
  // example: ccrun/token_file.h
  std::string token = read_token_file("/etc/ccrun/token", "--token-file");
  // end
}

void signal_names_h() {
  // example: ccrun/signal_names.h
  std::string a = signal_name(SIGSEGV);  // "SIGSEGV"
  std::string b = signal_name(77);       // "signal 77" (no name)
  int n = signal_number("SIGTERM");      // SIGTERM; 0 for a name that is no signal
  // end
  (void)n;
}

void host_name_h() {
  // example: ccrun/host_name.h
  std::string me = ccrun::host_name();   // "node7", as gethostname says
  // end
}

void error_h() {
  // example: ccrun/error.h
  throw TimeoutError("store 10.0.0.1:29400: timed out after 30s waiting "
                     "for key \"rdzv/round/3\"");
  // end
}

void collectives_h(size_t n) {
  // example: ccrun/collectives.h
  auto pg = ccrun::init_process_group();            // RANK, WORLD_SIZE, ...
  std::vector<float> grad(n);
  pg->all_reduce({grad.data(), grad.size(), ccrun::DataType::kFloat32},
                 ccrun::ReduceOp::kAvg)->wait();
  // end
}

void watch_lease_h(Store& store, const std::string& run_id, const JobState& job) {
  using namespace std::chrono_literals;
  // example: ccrun/watch_lease.h
  WatchLeaseWriter lease(run_id, "host:pid", 1s);    // the reader
  lease.renew(store, job.round, wall_clock_ms());     // at every refresh
  // end
}

void job_state_h(Store& store, const JobKeys& keys, int r) {
  // example: ccrun/job_state.h
  RoundEnd end{RoundEndKind::kNodeDead, 2, "node 2 sent no heartbeat", 3};
  store.compare_set(keys.end(r), "", end.to_json());  // the first end wins
  RoundEnd seen = RoundEnd::from_json(store.get(keys.end(r)));

  Failure f;
  f.rank = 3, f.cause = FailureCause::kOom;
  Failure back = Failure::from_json(f.to_json());     // back.cause == kOom

  JobState st = read_job_state(store, "my-job");      // never waits
  if (st.phase == JobPhase::kStopped) std::cout << st.stop_signal;
  // end
}

void finished_run_h(const std::optional<ClosedRecord>& closed,
                    const std::optional<RoundEnd>& current_end, const std::string& hint) {
  // example: ccrun/finished_run.h
  std::optional<FinishedRun> prev = finished_run(closed, current_end);
  if (prev) throw JobAlreadyRanError(already_ran_message("job7", *prev, wall_clock_ms(), hint));
  // end
}

void exclusion_h(Store& store) {
  using namespace std::chrono_literals;
  // example: ccrun/exclusion.h
  Exclusion e = exclude_node(store, "job", "gpu7", "its health gate failed", 60s);
  // e.until_ms: now + 60 s (120 s the second time, and so on)
  ExclusionList all = read_exclusions(store, "job");
  if (auto mine = all.active("gpu7", wall_clock_ms())) std::cout << describe(*mine, e.since_ms);
  // end
}

void rank_progress_h() {
  // example: ccrun/rank_progress.h
  RankView v;
  v.rank = 3, v.steps = 120;
  nlohmann::json j = v.to_json();           // {"rank": 3, "steps": 120, ...}
  RankView back = RankView::from_json(j);   // back.steps == 120
  // end
}

}  // namespace ccrun::docs_examples

// In the rendezvous namespace: its Backend is not the collectives'.
namespace ccrun::rendezvous::docs_examples {

void rendezvous_backend_h() {
  // example: ccrun/rendezvous_backend.h
  Backend b = parse_backend("c10d");   // throws ConfigError naming the valid ones
  std::string_view name = backend_name(b);  // "c10d"
  auto ep = store::parse_endpoint("h", kDefaultRendezvousPort);  // h:29400
  // end
  (void)name, (void)ep;
}

}  // namespace ccrun::rendezvous::docs_examples

namespace ccrun::docs_examples {

void numa_binding_h() {
  // example: ccrun/numa_binding.h
  NumaBinding m = parse_numa_binding("exclusive");  // throws ConfigError naming the valid ones
  std::string_view name = numa_binding_name(m);     // "exclusive"
  // end
  (void)name;
}

void event_log_handler_h() {
  // example: ccrun/event_log_handler.h
  EventLogHandler h = parse_event_log_handler("console");  // throws ConfigError naming the valid ones
  // end
  (void)h;
}

void name_table_h() {
  // example: ccrun/name_table.h
  enum class Color { kRed, kBlue };
  constexpr std::array<NamedValue<Color>, 2> kColors{{{"red", Color::kRed},
                                                      {"blue", Color::kBlue}}};
  std::string help = names_text(kColors);        // "red or blue"
  Color c = find_name(kColors, "blue")->value;   // find_name: nullptr for an unknown name
  std::string_view name = name_of(kColors, c, "?");  // "blue"
  // end
  (void)help;
  (void)name;
}

}  // namespace ccrun::docs_examples

namespace ccrun::agent::docs_examples {

void console_collapse_h() {
  boost::asio::io_context io;
  // example: ccrun/console_collapse.h
  ConsoleCollapser out(io, {1, 8, "[${rank}]:", "default"});
  out.submit(3, 3, "UserWarning: ...");   // ... from 8 ranks: one line
  // end
}

void console_frame_h() {
  boost::asio::io_context io;
  ConsoleCollapser collapser(io, {1, 8, "[${rank}]:", "default"});
  std::string line = "ccrun-line| 3 1 UserWarning: ...";
  // example: ccrun/console_frame.h
  std::string up;                     // an agent: what goes to the launcher
  for (auto& f : frame_console_unit({3, 1, "UserWarning: ..."})) up += f + "\n";
  if (auto u = parse_console_frame(line)) collapser.submit(u->rank, u->local_rank, u->text);
  // end
}

void numa_plan_h() {
  // example: ccrun/numa_plan.h
  Topology t = load_topology({});                  // this machine
  NumaPlan p = plan_numa_binding(t, NumaBinding::kExclusive, 3);
  // end
  (void)p;
}

void numa_topology_h() {
  // example: ccrun/numa_topology.h
  Topology t = load_topology({});                        // this machine
  TopologySource described;
  described.xml_file = "gpus.xml";
  Topology x = load_topology(described);                 // a described one
  // end
  (void)t, (void)x;
}

}  // namespace ccrun::agent::docs_examples
