// EtcdStore against real etcd (Debian's etcd-server), and open_store's
// address parsing. The Store contract itself runs in store_semantics_test.cpp
// (its "etcd" fixture); here: concurrency, leases, interrupts, auth, and a
// 3-member cluster whose leader is killed under load.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <set>
#include <thread>

#include "ccrun/error.h"
#include "ccrun/etcd_store.h"
#include "ccrun/store_address.h"
#include "ccrun/store_server.h"
#include "etcd_test_cluster.h"

using namespace ccrun::store;
using namespace std::chrono_literals;
using ccrun::testing::EtcdTestCluster;

namespace {

// One member shared by the tests of this file; each test uses its own prefix.
EtcdTestCluster& shared_etcd() {
  static EtcdTestCluster cluster(1);
  return cluster;
}

std::string fresh_prefix(const std::string& name) {
  static std::atomic<int> n{0};
  return "test/" + name + "/" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

}  // namespace

TEST_CASE("parse_store_address accepts tcp, file and etcd forms", "[store_address]") {
  auto a = parse_store_address("tcp://10.0.0.1:29400");
  CHECK(a.scheme == StoreScheme::kTcp);
  REQUIRE(a.hosts.size() == 1);
  CHECK(a.hosts[0].host == "10.0.0.1");
  CHECK(a.hosts[0].port == 29400);

  a = parse_store_address("tcp://[fd00::1]:5");
  CHECK(a.hosts[0].host == "fd00::1");
  CHECK(a.hosts[0].port == 5);

  a = parse_store_address("file:///shared/job.store");
  CHECK(a.scheme == StoreScheme::kFile);
  CHECK(a.path == "/shared/job.store");

  a = parse_store_address("etcd://e1:2379,e2:2380,[::1]:7/ccrun/job7");
  CHECK(a.scheme == StoreScheme::kEtcd);
  REQUIRE(a.hosts.size() == 3);
  CHECK(a.hosts[1].host == "e2");
  CHECK(a.hosts[1].port == 2380);
  CHECK(a.hosts[2].host == "::1");
  CHECK(a.path == "ccrun/job7");

  a = parse_store_address("etcd://e1");
  CHECK(a.hosts[0].port == 2379);
  CHECK(a.path.empty());
}

TEST_CASE("bad store addresses are errors naming the text and the forms", "[store_address]") {
  for (const char* bad : {"http://h:1", "tcp://host", "tcp://h:99999", "tcp://h:1,g:2",
                          "tcp://h:1/x", "file://relative/path", "etcd://", "etcd://h:0",
                          "etcd://h:x/p", "nonsense", "tcp://fd00::1:5"}) {
    INFO(bad);
    try {
      (void)parse_store_address(bad);
      FAIL("accepted");
    } catch (const ccrun::ConfigError& e) {
      CHECK_THAT(e.what(), Catch::Contains(bad));
      CHECK_THAT(e.what(), Catch::Contains("tcp://host:port, file:///path, or etcd://"));
    }
  }
}

TEST_CASE("open_store opens tcp:// and file:// stores", "[store_address]") {
  StoreServer server(StoreServerOptions{});
  server.start();
  OpenStoreOptions o;
  o.connect_timeout = 10s;
  auto tcp = open_store("tcp://127.0.0.1:" + std::to_string(server.port()), o);
  tcp->set("k", "v");
  CHECK(tcp->get("k") == "v");

  auto path = std::filesystem::temp_directory_path() /
              ("ccrun-open-store-" + std::to_string(::getpid()));
  std::filesystem::remove(path);
  auto file = open_store("file://" + path.string(), o);
  CHECK(file->add("n", 2) == 2);
  auto again = open_store("file://" + path.string(), o);
  CHECK(again->get("n") == "2");
  std::filesystem::remove(path);
}

TEST_CASE("open_store rejects misspelled etcd options before connecting", "[store_address]") {
  OpenStoreOptions o;
  o.conf = {{"etcd_pasword", "x"}, {"is_host", "1"}};  // is_host: the rendezvous's own
  CHECK_THROWS_WITH(open_store("etcd://127.0.0.1:1", o),
                    Catch::Contains("etcd_pasword") && Catch::Contains("etcd_password"));
  o.conf = {{"etcd_user", "u"}};
  CHECK_THROWS_WITH(open_store("etcd://127.0.0.1:1", o), Catch::Contains("both"));
}

TEST_CASE("an etcd store with no member answering fails naming the cause", "[etcd]") {
  EtcdStoreOptions o;
  o.endpoints = {{"127.0.0.1", ccrun::testing::free_port("127.0.0.1")}};
  o.connect_timeout = 500ms;
  try {
    EtcdStore s(o);
    FAIL("connected");
  } catch (const ccrun::ConnectionError& e) {
    CHECK_THAT(e.what(), Catch::Contains("no member") && Catch::Contains("127.0.0.1"));
  }
}

TEST_CASE("etcd store: open_store, prefixes and blocking calls", "[etcd]") {
  if (!ccrun::testing::etcd_available()) {
    WARN(ccrun::testing::etcd_skip_reason());
    return;
  }
  auto& etcd = shared_etcd();
  const std::string p = fresh_prefix("basic");
  OpenStoreOptions o;
  o.timeout = 10s;
  auto a = open_store(etcd.address(p + "/a"), o);
  auto b = open_store(etcd.address(p + "/b"), o);
  auto whole = std::make_shared<EtcdStore>(etcd.options(p));

  SECTION("local_address is this end of the connection to etcd") {
    CHECK(whole->local_address() == "127.0.0.1");
  }

  SECTION("keys live under the prefix, apart from other prefixes") {
    a->set("k", "1");
    b->set("k", "2");
    CHECK(a->get("k") == "1");
    CHECK(b->get("k") == "2");
    CHECK(whole->get("a/k") == "1");
    CHECK(a->num_keys() == 1);
    CHECK(whole->num_keys() == 2);
    CHECK(a->add("n", 1) == 1);  // writes a sequence key, not counted
    CHECK(a->num_keys() == 2);
  }

  SECTION("wait for several keys is woken by sets from other clients") {
    std::atomic<bool> returned{false};
    std::thread waiter([&] {
      a->wait({"x", "y", "z"}, 10s);
      returned = true;
    });
    auto other = open_store(etcd.address(p + "/a"), o);
    other->set("x", "1");
    other->multi_set({"y"}, {"2"});
    std::this_thread::sleep_for(200ms);
    CHECK_FALSE(returned);  // "z" is still missing
    other->set("z", "3");
    waiter.join();
    CHECK(returned);
  }

  SECTION("a deleted key is missing again for a waiter") {
    a->set("d", "1");
    CHECK(a->delete_key("d"));
    auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_AS(a->wait({"d"}, 300ms), ccrun::TimeoutError);
    auto took = std::chrono::steady_clock::now() - start;
    CHECK(took >= 300ms);
    CHECK(took < 2s);
  }

  SECTION("get times out at its timeout, then the store is usable") {
    a->set_timeout(250ms);
    auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(a->get("never"), Catch::Contains("never") && Catch::Contains("250ms"));
    auto took = std::chrono::steady_clock::now() - start;
    CHECK(took >= 250ms);
    CHECK(took < 2s);
    a->set("now", "1");
    CHECK(a->get("now") == "1");
  }

  SECTION("an interrupt ends a blocked wait at once") {
    auto interrupt = std::make_shared<StoreInterrupt>();
    auto opts = etcd.options(p + "/a");
    opts.interrupt = interrupt;
    EtcdStore s(opts);
    std::thread stopper([&] {
      std::this_thread::sleep_for(200ms);
      interrupt->trigger();
    });
    auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_AS(s.wait({"never"}, 30s), ccrun::InterruptedError);
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    stopper.join();
    interrupt->reset();
    s.set("after", "1");
    CHECK(s.get("after") == "1");
  }
}

TEST_CASE("etcd store: add under contention is exact, compare_set has one winner", "[etcd]") {
  if (!ccrun::testing::etcd_available()) {
    WARN(ccrun::testing::etcd_skip_reason());
    return;
  }
  auto& etcd = shared_etcd();
  const std::string p = fresh_prefix("contention");
  constexpr int kThreads = 16, kAdds = 25;
  std::mutex mu;
  std::set<int64_t> seen;
  std::set<std::string> cas_results;
  std::atomic<int> winners{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      EtcdStore s(etcd.options(p));
      std::string me = "node-" + std::to_string(t);
      std::string got = s.compare_set("leader", "", me);
      if (got == me) ++winners;
      for (int i = 0; i < kAdds; ++i) {
        int64_t v = s.add("count", 1);
        std::lock_guard lock(mu);
        seen.insert(v);
      }
      std::lock_guard lock(mu);
      cas_results.insert(got);
    });
  }
  for (auto& t : threads) t.join();
  EtcdStore s(etcd.options(p));
  CHECK(s.get("count") == std::to_string(kThreads * kAdds));
  CHECK(seen.size() == size_t{kThreads * kAdds});  // every add saw its own value
  CHECK(*seen.rbegin() == kThreads * kAdds);
  CHECK(winners == 1);
  CHECK(cas_results.size() == 1);  // every loser was told the winner's value
  CHECK(s.get("leader") == *cas_results.begin());
  // A compare_set that expects the winner's value swaps it.
  CHECK(s.compare_set("leader", *cas_results.begin(), "next") == "next");
}

TEST_CASE("etcd store: a counter's journal keeps add exact across set, compare_set, append "
          "and delete, and stays short", "[etcd]") {
  if (!ccrun::testing::etcd_available()) {
    WARN(ccrun::testing::etcd_skip_reason());
    return;
  }
  auto& etcd = shared_etcd();
  const std::string p = fresh_prefix("journal");
  EtcdStore a(etcd.options(p + "/a"));
  EtcdStore other(etcd.options(p + "/a"));
  EtcdStore whole(etcd.options(p));
  CHECK(a.add("c", 5) == 5);
  CHECK(other.add("c", 2) == 7);
  CHECK(a.get("c") == "7");
  CHECK(a.multi_get({"c", "c"}) == std::vector<std::string>{"7", "7"});
  a.set("c", "10");  // a put starts the counter over: earlier adds stop counting
  CHECK(other.add("c", 1) == 11);
  CHECK(a.add("c", 0) == 11);
  CHECK(a.compare_set("c", "10", "x") == "11");  // compared with the counter's value
  CHECK(a.compare_set("c", "11", "20") == "20");
  CHECK(other.add("c", 1) == 21);
  a.append("c", "0");
  CHECK(a.get("c") == "210");
  CHECK(a.add("c", -10) == 200);
  CHECK(a.delete_key("c"));
  CHECK_FALSE(a.check({"c"}));
  CHECK(a.add("c", 1) == 1);  // the deleted counter's entries are gone
  // add(key, 0) of a missing key creates it at 0.
  CHECK(a.add("zero", 0) == 0);
  CHECK(other.get("zero") == "0");
  // Many adds: every 32 live entries are folded into the key's value, so
  // the journal stays short (whole's num_keys counts a's journal entries).
  for (int i = 1; i < 100; ++i) other.add("c", 1);
  CHECK(a.get("c") == "100");
  CHECK(a.num_keys() == 2);                       // c and zero
  CHECK(whole.num_keys() <= 2 + 2 + 32);          // + sequence keys + a short journal
}

TEST_CASE("etcd store: leases keep keys alive and take them away", "[etcd]") {
  if (!ccrun::testing::etcd_available()) {
    WARN(ccrun::testing::etcd_skip_reason());
    return;
  }
  auto& etcd = shared_etcd();
  EtcdStore s(etcd.options(fresh_prefix("lease")));
  int64_t lease = s.grant_lease(2s);
  CHECK(lease != 0);
  s.set("alive/node0", "1", lease);
  CHECK(s.keep_alive(lease) >= 1s);
  CHECK(s.check({"alive/node0"}));
  s.revoke_lease(lease);
  CHECK_FALSE(s.check({"alive/node0"}));
  CHECK_THROWS_WITH(s.keep_alive(lease), Catch::Contains("expired"));
  s.revoke_lease(lease);  // revoked already: not an error

  // Not kept alive: etcd deletes the key when the TTL runs out, which wakes
  // nobody but is seen by check().
  int64_t short_lease = s.grant_lease(1s);
  s.set("alive/node1", "1", short_lease);
  CHECK(s.check({"alive/node1"}));
  // etcd expires leases on its own schedule (a second or two past the TTL):
  // the key goes within a generous deadline, not at a set time.
  auto deadline = std::chrono::steady_clock::now() + 15s;
  while (s.check({"alive/node1"}) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  CHECK_FALSE(s.check({"alive/node1"}));
}

TEST_CASE("etcd store: user and password through etcd's auth", "[etcd]") {
  if (!ccrun::testing::etcd_available()) {
    WARN(ccrun::testing::etcd_skip_reason());
    return;
  }
  EtcdTestCluster etcd(1);  // its own member: auth stays on once enabled
  {
    auto o = etcd.options("any");
    auto state = std::make_shared<etcd::ClientState>(o);
    etcd::EtcdConnection c(state);
    c.post("/v3/auth/user/add", {{"name", "root"}, {"password", "s3cret"}}, true);
    c.post("/v3/auth/user/grant", {{"user", "root"}, {"role", "root"}}, true);
    c.post("/v3/auth/enable", nlohmann::json::object(), true);
  }
  OpenStoreOptions o;
  o.conf = {{"etcd_user", "root"}, {"etcd_password", "s3cret"}};
  auto s = open_store(etcd.address("auth"), o);
  s->set("k", "v");
  CHECK(s->get("k") == "v");
  CHECK(s->add("n", 3) == 3);

  o.conf["etcd_password"] = "wrong";
  CHECK_THROWS_AS(open_store(etcd.address("auth"), o), ccrun::AuthError);
  o.conf.clear();
  CHECK_THROWS_AS(open_store(etcd.address("auth"), o), ccrun::AuthError);
}

TEST_CASE("etcd store: a 3-member cluster loses nothing when its leader is killed",
          "[etcd][cluster]") {
  if (!ccrun::testing::etcd_available()) {
    WARN(ccrun::testing::etcd_skip_reason());
    return;
  }
  EtcdTestCluster etcd(3);
  const std::string p = "failover";
  constexpr int kClients = 6, kRounds = 120;
  std::atomic<int> progress{0};
  constexpr int kKillAt = kClients * kRounds / 4;
  std::condition_variable under_way;  // progress reached kKillAt, or an error
  std::mutex mu;
  std::set<int64_t> seen;
  std::vector<std::string> errors;
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      try {
        auto o = etcd.options(p);
        // Clients start on different members, so some sit on the leader.
        std::rotate(o.endpoints.begin(), o.endpoints.begin() + t % 3, o.endpoints.end());
        o.timeout = 60s;
        EtcdStore s(o);
        for (int i = 0; i < kRounds; ++i) {
          int64_t v = s.add("total", 1);
          s.set("k/" + std::to_string(t) + "/" + std::to_string(i), std::to_string(v));
          // Each client waits for its neighbour's key of this round.
          s.wait({"k/" + std::to_string((t + 1) % kClients) + "/" + std::to_string(i)});
          {
            std::lock_guard lock(mu);
            seen.insert(v);
          }
          if (++progress == kKillAt) under_way.notify_all();
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        errors.push_back(e.what());
        under_way.notify_all();
      }
    });
  }
  // Kill the leader once the clients are well under way.
  {
    std::unique_lock lock(mu);
    under_way.wait_for(lock, 60s, [&] { return progress >= kKillAt || !errors.empty(); });
  }
  int leader = etcd.leader();
  etcd.kill(static_cast<size_t>(leader));
  int at_kill = progress;
  for (auto& c : clients) c.join();
  INFO("killed member " << leader << " after " << at_kill << " rounds");
  for (const auto& e : errors) INFO(e);
  REQUIRE(errors.empty());
  CHECK(at_kill < kClients * kRounds);  // the kill happened mid-run
  auto o = etcd.options(p);
  EtcdStore s(o);
  CHECK(s.get("total") == std::to_string(kClients * kRounds));
  CHECK(seen.size() == size_t{kClients * kRounds});  // no add applied twice or lost
  CHECK(s.num_keys() == kClients * kRounds + 1);
  CHECK(etcd.leader() != leader);
}

TEST_CASE("etcd store: TLS to a member, verified against the CA given", "[etcd]") {
  if (!ccrun::testing::etcd_available()) {
    WARN(ccrun::testing::etcd_skip_reason());
    return;
  }
  if (::access("/usr/bin/openssl", X_OK) != 0) {
    WARN("skipped: /usr/bin/openssl is missing (Debian's openssl) to make a test certificate");
    return;
  }
  auto dir = std::filesystem::temp_directory_path() /
             ("ccrun-etcd-tls-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string cert = (dir / "cert.pem").string(), key = (dir / "key.pem").string();
  // A self-signed certificate for 127.0.0.1 (it is its own CA).
  std::string cmd = "/usr/bin/openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1"
                    " -addext subjectAltName=IP:127.0.0.1 -keyout " + key + " -out " + cert +
                    " >/dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  {
    EtcdTestCluster etcd(1, cert, key);
    OpenStoreOptions o;
    o.connect_timeout = 3s;
    o.conf = {{"etcd_ca", cert}};
    auto s = open_store(etcd.address("tls"), o);
    s->set("k", "v");
    CHECK(s->get("k") == "v");
    CHECK(s->add("n", 2) == 2);
    s->wait({"k"});

    // Plain HTTP to a TLS member is no store; neither is TLS without trusting its CA.
    o.conf.clear();
    CHECK_THROWS_WITH(open_store(etcd.address("tls"), o), Catch::Contains("TLS is on"));
    o.conf = {{"protocol", "https"}};
    CHECK_THROWS_WITH(open_store(etcd.address("tls"), o), Catch::Contains("certificate verify failed"));
  }
  std::filesystem::remove_all(dir);
}
