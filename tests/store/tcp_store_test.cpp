// TcpStore against peers that are not stores: an HTTP server
// must be recognised on its first reply with a typed error naming the
// endpoint, once, not retried; a server that accepts and never answers
// must not make any call block past its timeout.
#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "ccrun/error.h"
#include "ccrun/tcp_store.h"

using namespace ccrun::store;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// A loopback listener served by one thread: `answer` runs per connection.
// With no answer, connections are accepted and held open, never answered.
class FakePeer {
 public:
  explicit FakePeer(std::string answer, bool respond) : answer_(std::move(answer)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd_, 64) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, respond] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) continue;
        if (!respond) {
          held_.push_back(c);
          continue;
        }
        // As an HTTP server does with bytes it cannot parse: a status line,
        // then it hangs up.
        pollfd q{c, POLLIN, 0};
        char buf[1024];
        if (::poll(&q, 1, 2000) > 0 && ::recv(c, buf, sizeof buf, 0) > 0) {
          ::send(c, answer_.data(), answer_.size(), MSG_NOSIGNAL);
        }
        ::close(c);
        ++served_;
      }
    });
  }
  ~FakePeer() {
    stop_ = true;
    thread_.join();
    for (int c : held_) ::close(c);
    ::close(fd_);
  }
  uint16_t port() const { return port_; }
  int served() const { return served_; }

 private:
  std::string answer_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> served_{0};
  std::vector<int> held_;
  std::thread thread_;
};

const std::string kHttp400 =
    "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n";

// Runs f; it must throw NotAStoreError saying where and what answered.
template <typename F>
void expect_not_a_store(F&& f, uint16_t port) {
  try {
    f();
    FAIL("no NotAStoreError");
  } catch (const ccrun::NotAStoreError& e) {
    std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("127.0.0.1:" + std::to_string(port)) &&
                         Catch::Contains("not a ccrun or torch store"));
    if (what.find("HTTP") != std::string::npos) {
      CHECK_THAT(what, Catch::Contains("\"HTTP/1.1 400 Bad Request\""));
    }
  }
}

template <typename F>
std::chrono::milliseconds timed(F&& f) {
  auto t0 = Clock::now();
  f();
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
}

}  // namespace

TEST_CASE("an HTTP server at the store's address: NotAStoreError on the first reply",
          "[tcp_store]") {
  FakePeer http(kHttp400, true);
  TcpStoreOptions o;
  o.port = http.port();
  o.connect_timeout = 3s;
  o.timeout = 60s;
  const uint16_t port = http.port();
  SECTION("a one-byte reply (CHECK), fast, not retried") {
    TcpStore store(o);  // the 2.x handshake (VALIDATE) has no reply
    auto took = timed([&] {
      expect_not_a_store([&] { (void)store.check({"k"}); }, port);
    });
    CHECK(took < 1500ms);
    CHECK(http.served() <= 1);  // one connection: the error is not retried
  }
  SECTION("a length (the GET's WAIT first), a counter, a key count") {
    TcpStore store(o);
    expect_not_a_store([&] { (void)store.get("k"); }, port);
    expect_not_a_store([&] { (void)store.add("n", 1); }, port);
    expect_not_a_store([&] { (void)store.num_keys(); }, port);
    CHECK_THROWS_AS(store.compare_set("k", "", "v"), ccrun::NotAStoreError);
  }
  SECTION("the 1.13 dialect") {
    o.protocol = TcpStoreOptions::Protocol::kTorch113;
    TcpStore store(o);
    expect_not_a_store([&] { (void)store.num_keys(); }, port);
  }
  SECTION("with a token: at connect") {
    o.token = "s3cret";
    expect_not_a_store([&] { TcpStore store(o); }, port);
  }
  SECTION("a binary peer whose first reply reads as neither") {
    FakePeer other(std::string("\x07\x00\x00\x00\x00\x00\x00\x00", 8), true);
    o.port = other.port();
    TcpStore store(o);
    CHECK_THROWS_AS(store.wait({"k"}, 1s), ccrun::NotAStoreError);
  }
}

TEST_CASE("a peer that accepts and never answers: every call ends within its timeout",
          "[tcp_store]") {
  FakePeer silent("", false);
  TcpStoreOptions o;
  o.port = silent.port();
  o.connect_timeout = 3s;
  o.timeout = 60s;  // the agent's read_timeout
  TcpStore store(o);
  store.set_timeout(1s);  // the agent's join_timeout
  CHECK(timed([&] { CHECK_THROWS_AS(store.check({"k"}), ccrun::TimeoutError); }) < 2500ms);
  CHECK(timed([&] { CHECK_THROWS_AS(store.num_keys(), ccrun::TimeoutError); }) < 2500ms);
  CHECK(timed([&] { CHECK_THROWS_AS(store.add("n", 1), ccrun::TimeoutError); }) < 2500ms);
  // A wait: its timeout, then at most 1 s for the CANCEL_WAIT.
  CHECK(timed([&] { CHECK_THROWS_AS(store.wait({"k"}, 500ms), ccrun::TimeoutError); }) <
        2500ms);
  CHECK(timed([&] { CHECK_THROWS_AS(store.get("k"), ccrun::TimeoutError); }) < 3500ms);
  CHECK(timed([&] { CHECK_THROWS_AS(store.multi_get({"a", "b"}), ccrun::TimeoutError); }) <
        3500ms);
  // A connection that was never answered is still being made: its first
  // reply waits at most connect_timeout, even with no set_timeout (the
  // agent's rendezvous handler: read_timeout 60 s, join_timeout 3 s).
  TcpStoreOptions fresh = o;
  fresh.connect_timeout = 1s;
  TcpStore handler_like(fresh);
  CHECK(timed([&] {
          CHECK_THROWS_WITH(handler_like.check({"k"}),
                            Catch::Contains("accepted the connection but sent no reply"));
        }) < 2500ms);
  // With a token, the handshake waits at most connect_timeout.
  TcpStoreOptions t = o;
  t.token = "s3cret";
  t.connect_timeout = 1s;
  CHECK(timed([&] { CHECK_THROWS_AS(TcpStore(t), ccrun::AuthError); }) < 2500ms);
}
