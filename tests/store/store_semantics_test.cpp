// One suite of the Store contract (include/ccrun/store.h), run against every
// implementation: HashStore, FileStore, PrefixStore, and TcpStore talking to
// a real StoreServer over loopback in both wire dialects, and EtcdStore on a
// real etcd member (when /usr/bin/etcd is installed).
#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>

#include "ccrun/error.h"
#include "ccrun/etcd_store.h"
#include "ccrun/file_store.h"
#include "ccrun/hash_store.h"
#include "ccrun/prefix_store.h"
#include "ccrun/store_server.h"
#include "ccrun/tcp_store.h"
#include "etcd_test_cluster.h"

using namespace ccrun::store;
using namespace std::chrono_literals;

namespace {

// A store under test, plus whatever keeps it alive (a server, a file).
struct Fixture {
  std::string name;
  std::function<std::shared_ptr<Store>()> open;  // another handle, same data
  bool has_append = true;
  std::shared_ptr<void> keepalive;
};

std::vector<std::string> fixture_names() {
  std::vector<std::string> names{"hash", "file", "prefix", "tcp-torch2", "tcp-torch113"};
  if (ccrun::testing::etcd_available()) {
    names.push_back("etcd");
  } else {
    WARN("store semantics: etcd fixture " << ccrun::testing::etcd_skip_reason());
  }
  return names;
}

Fixture make_fixture(const std::string& name) {
  Fixture f;
  f.name = name;
  if (name == "hash") {
    auto store = std::make_shared<HashStore>();
    f.open = [store] { return store; };
  } else if (name == "file") {
    auto path = std::make_shared<std::string>(
        (std::filesystem::temp_directory_path() /
         ("ccrun-filestore-test-" + std::to_string(getpid()) + "-" +
          std::to_string(std::rand())))
            .string());
    std::filesystem::remove(*path);
    f.open = [path] { return std::make_shared<FileStore>(*path); };
    f.keepalive = std::shared_ptr<void>(nullptr, [path](void*) {
      std::filesystem::remove(*path);
    });
  } else if (name == "prefix") {
    auto base = std::make_shared<HashStore>();
    f.open = [base] { return std::make_shared<PrefixStore>("job/attempt_0", base); };
  } else if (name == "etcd") {
    // One member for the whole run; every fixture its own key prefix.
    static auto cluster = std::make_shared<ccrun::testing::EtcdTestCluster>(1);
    static int n = 0;
    auto opts = cluster->options("semantics/" + std::to_string(::getpid()) + "-" +
                                 std::to_string(n++));
    f.open = [opts] { return std::make_shared<EtcdStore>(opts); };
    f.keepalive = cluster;
  } else {
    auto server = std::make_shared<StoreServer>(StoreServerOptions{});
    server->start();
    TcpStoreOptions opts;
    opts.port = server->port();
    opts.connect_timeout = 10s;
    if (name == "tcp-torch113") {
      opts.protocol = TcpStoreOptions::Protocol::kTorch113;
      f.has_append = false;
    }
    f.open = [opts] { return std::make_shared<TcpStore>(opts); };
    f.keepalive = server;
  }
  return f;
}

}  // namespace

TEST_CASE("store semantics hold for every Store implementation", "[store]") {
  for (const auto& name : fixture_names()) {
    DYNAMIC_SECTION(name) {
      Fixture f = make_fixture(name);
      auto store = f.open();
      store->set_timeout(10s);

      SECTION("set then get returns the value, binary-safe") {
        std::string binary("a\0b\xff", 4);
        store->set("k", binary);
        CHECK(store->get("k") == binary);
        store->set("k", "");
        CHECK(store->get("k").empty());
        store->set("k", "v2");
        CHECK(store->get("k") == "v2");
      }

      SECTION("get blocks until another client sets the key") {
        auto other = f.open();
        std::thread setter([&] {
          std::this_thread::sleep_for(100ms);
          other->set("late", "here");
        });
        CHECK(store->get("late") == "here");
        setter.join();
      }

      SECTION("get of a missing key times out naming the key") {
        store->set_timeout(200ms);
        try {
          (void)store->get("never/set");
          FAIL("get returned");
        } catch (const ccrun::TimeoutError& e) {
          CHECK_THAT(e.what(), Catch::Contains("never/set"));
          CHECK_THAT(e.what(), Catch::Contains("200ms"));
        }
        // The client stays usable after a timeout.
        store->set("after", "1");
        CHECK(store->get("after") == "1");
      }

      SECTION("add creates at 0, returns the new value, and is atomic") {
        CHECK(store->add("ctr", 5) == 5);
        CHECK(store->add("ctr", -2) == 3);
        CHECK(store->get("ctr") == "3");
        std::vector<std::thread> threads;
        for (int t = 0; t < 8; ++t) {
          threads.emplace_back([&] {
            auto s = f.open();
            for (int i = 0; i < 50; ++i) s->add("shared", 1);
          });
        }
        for (auto& t : threads) t.join();
        CHECK(store->add("shared", 0) == 400);
      }

      SECTION("compare_set covers every case") {
        CHECK(store->compare_set("cs", "", "first") == "first");    // create
        CHECK(store->get("cs") == "first");
        CHECK(store->compare_set("cs", "wrong", "x") == "first");   // mismatch
        CHECK(store->compare_set("cs", "first", "second") == "second");
        CHECK(store->get("cs") == "second");
        CHECK(store->compare_set("absent", "expected", "x") == "expected");
        CHECK_FALSE(store->check({"absent"}));
      }

      SECTION("update_by_compare_set: writers on clients of their own each land every write") {
        std::vector<std::thread> writers;
        std::atomic<int> written{0};  // counted here: Catch's assertions are not thread-safe
        for (int w = 0; w < 3; ++w) {
          writers.emplace_back([&f, &written, w] {
            auto mine = f.open();
            for (int i = 0; i < 10; ++i) {
              auto wrote = ccrun::store::update_by_compare_set(*mine, "list", [&](const std::string& now) {
                return std::optional<std::string>(now + char('a' + w));
              });
              if (wrote) ++written;
            }
          });
        }
        for (auto& t : writers) t.join();
        CHECK(written == 30);
        std::string list = store->get("list");
        CHECK(list.size() == 30);
        for (char c : {'a', 'b', 'c'}) CHECK(std::count(list.begin(), list.end(), c) == 10);
        // A change that declines writes nothing.
        CHECK_FALSE(ccrun::store::update_by_compare_set(*store, "list", [](const std::string&) {
          return std::optional<std::string>();
        }));
        CHECK(store->get("list") == list);
      }

      SECTION("check never blocks; wait blocks until all keys exist") {
        CHECK_FALSE(store->check({"w1", "w2"}));
        store->set("w1", "1");
        CHECK_FALSE(store->check({"w1", "w2"}));
        auto other = f.open();
        std::thread setter([&] {
          std::this_thread::sleep_for(100ms);
          other->set("w2", "2");
        });
        store->wait({"w1", "w2"}, 10s);
        setter.join();
        CHECK(store->check({"w1", "w2"}));
        CHECK_THROWS_AS(store->wait({"w1", "w3"}, 100ms), ccrun::TimeoutError);
      }

      SECTION("delete_key and num_keys") {
        int64_t before = store->num_keys();
        store->set("d1", "x");
        store->set("d2", "y");
        CHECK(store->num_keys() == before + 2);
        CHECK(store->delete_key("d1"));
        CHECK_FALSE(store->delete_key("d1"));
        CHECK_FALSE(store->check({"d1"}));
        CHECK(store->num_keys() == before + 1);
      }

      SECTION("multi_set and multi_get keep order") {
        store->multi_set({"m1", "m2", "m3"}, {"a", "", "c"});
        CHECK(store->multi_get({"m3", "m1", "m2"}) ==
              std::vector<std::string>{"c", "a", ""});
        CHECK_THROWS(store->multi_set({"x"}, {}));
      }

      SECTION("append creates and extends") {
        if (f.has_append) {
          store->append("log", "ab");
          store->append("log", "cd");
          CHECK(store->get("log") == "abcd");
        } else {
          CHECK_THROWS_AS(store->append("log", "ab"), ccrun::NotSupportedError);
        }
      }

      SECTION("add on a value that is not a counter fails clearly") {
        store->set("text", "hello");
        if (name.rfind("tcp", 0) == 0) {
          // The server closes that connection; the client reports it.
          CHECK_THROWS_AS(store->add("text", 1), ccrun::Error);
        } else {
          CHECK_THROWS_WITH(store->add("text", 1), Catch::Contains("text"));
        }
        auto fresh = f.open();
        CHECK(fresh->get("text") == "hello");
      }
    }
  }
}

TEST_CASE("PrefixStore namespaces keys under prefix/", "[store]") {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("a", base), b("b", base);
  a.set("k", "1");
  b.set("k", "2");
  CHECK(base->get("a/k") == "1");
  CHECK(base->get("b/k") == "2");
  CHECK(a.get("k") == "1");
  CHECK(a.num_keys() == 2);
}
