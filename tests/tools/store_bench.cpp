// store_bench: the load generator of scripts/bench-store.sh. One thread,
// Boost.Asio, N client connections speaking the TCPStore protocol (torch
// 1.13 dialect by default: both servers under test understand it). Prints
// one JSON line per measurement.
//
//   store_bench --port P throughput --clients 16 --seconds 3
//   store_bench --port P barrier --clients 8192
//   store_bench --port P hold --clients 8192 --seconds 5
#include <CLI/CLI.hpp>

#include <utility>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ccrun/store_server.h"
#include "wire_protocol.h"

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
namespace wire = ccrun::store::wire;

namespace {

struct Options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  bool torch2 = false;  // speak the 2.x dialect (ccrun's server only)
  int clients = 1;
  double seconds = 3;
};

uint8_t type(const Options& o, wire::Query q) {
  if (o.torch2) return uint8_t(q);
  switch (q) {
    case wire::Query::kSet: return uint8_t(wire::LegacyQuery::kSet);
    case wire::Query::kGet: return uint8_t(wire::LegacyQuery::kGet);
    case wire::Query::kAdd: return uint8_t(wire::LegacyQuery::kAdd);
    case wire::Query::kWait: return uint8_t(wire::LegacyQuery::kWait);
    default: return 0xff;
  }
}

std::string request(const Options& o, wire::Query q, const std::string& key,
                    const std::string& value = {}, int64_t delta = 0) {
  std::string r;
  wire::append_u8(r, type(o, q));
  if (q == wire::Query::kWait) wire::append_u64(r, 1);
  wire::append_bytes(r, key);
  if (q == wire::Query::kSet) wire::append_bytes(r, value);
  if (q == wire::Query::kAdd) wire::append_i64(r, delta);
  return r;
}

// Opens n connections, at most 256 connecting at once (a listen backlog
// overflow would otherwise cost a 1 s SYN retry).
std::vector<std::shared_ptr<tcp::socket>> connect_all(asio::io_context& io, const Options& o,
                                                      int n) {
  std::vector<std::shared_ptr<tcp::socket>> sockets;
  tcp::endpoint ep(asio::ip::make_address(o.host), o.port);
  std::string hello;
  if (o.torch2) {
    wire::append_u8(hello, uint8_t(wire::Query::kValidate));
    wire::append_u32(hello, wire::kValidationMagic);
  }
  int next = 0, open = 0, failed = 0;
  std::function<void()> launch = [&] {
    while (next < n && open < 256) {
      auto s = std::make_shared<tcp::socket>(io);
      sockets.push_back(s);
      ++next;
      ++open;
      s->async_connect(ep, [&, s](boost::system::error_code ec) {
        --open;
        if (ec) {
          ++failed;
        } else {
          s->set_option(tcp::no_delay(true));
          if (!hello.empty()) asio::write(*s, asio::buffer(hello));
        }
        launch();
      });
    }
  };
  launch();
  io.run();
  io.restart();
  if (failed) {
    std::fprintf(stderr, "store_bench: %d of %d connections failed\n", failed, n);
    std::exit(1);
  }
  return sockets;
}

// One client of the throughput test: SET, GET, ADD in a loop, one request
// (and its reply) at a time.
struct LoopClient : std::enable_shared_from_this<LoopClient> {
  LoopClient(std::shared_ptr<tcp::socket> s, const Options& o, int id, uint64_t& ops,
             Clock::time_point end)
      : sock(std::move(s)), ops(ops), end(end) {
    std::string key = "bench/" + std::to_string(id);
    set_get = request(o, wire::Query::kSet, key, std::string(32, 'v')) +
              request(o, wire::Query::kGet, key);
    add = request(o, wire::Query::kAdd, key + "/n", {}, 1);
  }
  void step() {
    if (Clock::now() >= end) return;
    auto self = shared_from_this();
    asio::async_write(*sock, asio::buffer(set_get), [self](auto ec, size_t) {
      if (ec) return;
      asio::async_read(*self->sock, asio::buffer(self->buf, 8 + 32), [self](auto ec2, size_t) {
        if (ec2) return;
        self->ops += 2;
        asio::async_write(*self->sock, asio::buffer(self->add), [self](auto ec3, size_t) {
          if (ec3) return;
          asio::async_read(*self->sock, asio::buffer(self->buf, 8), [self](auto ec4, size_t) {
            if (ec4) return;
            self->ops += 1;
            self->step();
          });
        });
      });
    });
  }
  std::shared_ptr<tcp::socket> sock;
  std::string set_get, add;
  char buf[64];
  uint64_t& ops;
  Clock::time_point end;
};

int run_throughput(const Options& o) {
  asio::io_context io(1);
  auto sockets = connect_all(io, o, o.clients);
  uint64_t ops = 0;
  // Warm-up, not counted.
  auto warm_end = Clock::now() + std::chrono::milliseconds(300);
  for (int i = 0; i < o.clients; ++i) {
    std::make_shared<LoopClient>(sockets[i], o, i, ops, warm_end)->step();
  }
  io.run();
  io.restart();
  ops = 0;
  auto start = Clock::now();
  auto end = start + std::chrono::milliseconds(int64_t(o.seconds * 1000));
  for (int i = 0; i < o.clients; ++i) {
    std::make_shared<LoopClient>(sockets[i], o, i, ops, end)->step();
  }
  io.run();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("{\"mode\":\"throughput\",\"clients\":%d,\"ops\":%llu,\"seconds\":%.3f,"
              "\"ops_per_s\":%.0f}\n",
              o.clients, (unsigned long long)ops, secs, ops / secs);
  return 0;
}

int run_barrier(const Options& o) {
  asio::io_context io(1);
  auto sockets = connect_all(io, o, o.clients);
  std::string id = std::to_string(Clock::now().time_since_epoch().count());
  std::string add = request(o, wire::Query::kAdd, "barrier/" + id, {}, 1);
  std::string wait = request(o, wire::Query::kWait, "barrier/" + id + "/go");
  std::string go = request(o, wire::Query::kSet, "barrier/" + id + "/go", "1");
  int released = 0;
  std::vector<std::array<char, 8>> bufs(o.clients);
  auto start = Clock::now();
  for (int i = 0; i < o.clients; ++i) {
    auto& s = *sockets[i];
    auto& b = bufs[i];
    asio::async_write(s, asio::buffer(add), [&, i](auto ec, size_t) {
      if (ec) return;
      asio::async_read(s, asio::buffer(b, 8), [&, i](auto ec2, size_t) {
        if (ec2) return;
        int64_t n;
        std::memcpy(&n, b.data(), 8);
        // The last to arrive sets the key, then everyone waits for it.
        std::string* msg = new std::string(n == o.clients ? go + wait : wait);
        asio::async_write(s, asio::buffer(*msg), [&, msg](auto ec3, size_t) {
          delete msg;
          if (ec3) return;
          asio::async_read(s, asio::buffer(b, 1), [&](auto ec4, size_t) {
            if (!ec4) ++released;
          });
        });
      });
    });
  }
  io.run();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (released != o.clients) {
    std::fprintf(stderr, "store_bench: only %d of %d clients were released\n", released,
                 o.clients);
    return 1;
  }
  std::printf("{\"mode\":\"barrier\",\"clients\":%d,\"seconds\":%.4f}\n", o.clients, secs);
  return 0;
}

int run_hold(const Options& o) {
  asio::io_context io(1);
  auto sockets = connect_all(io, o, o.clients);
  std::printf("{\"mode\":\"hold\",\"clients\":%d,\"ready\":true}\n", o.clients);
  std::fflush(stdout);
  asio::steady_timer t(io, std::chrono::milliseconds(int64_t(o.seconds * 1000)));
  t.wait();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Load generator for TCPStore servers"};
  Options o;
  app.add_option("--host", o.host);
  app.add_option("--port", o.port)->required();
  app.add_flag("--torch2", o.torch2, "speak the torch 2.x dialect (default: 1.13)");
  std::string mode;
  app.add_option("mode", mode)->required()->check(CLI::IsMember({"throughput", "barrier", "hold"}));
  app.add_option("--clients", o.clients)->check(CLI::PositiveNumber);
  app.add_option("--seconds", o.seconds);
  CLI11_PARSE(app, argc, argv);
  ccrun::store::raise_open_file_limit();
  if (mode == "throughput") return run_throughput(o);
  if (mode == "barrier") return run_barrier(o);
  return run_hold(o);
}
