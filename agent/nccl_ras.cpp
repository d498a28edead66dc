// NCCL's RAS status (see nccl_ras.h): one connection, Asio handlers, one
// deadline for the whole exchange.
#include "nccl_ras.h"

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange
#include <boost/asio.hpp>

#include <cstdlib>
#include <memory>

#include "ccrun/endpoint.h"

namespace ccrun::agent {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr uint16_t kRasPort = 28028;  // NCCL_RAS_CLIENT_PORT

// One exchange: resolve, connect, handshake, ask, read to EOF.
struct RasExchange : std::enable_shared_from_this<RasExchange> {
  RasExchange(asio::io_context& io, int timeout_s) : resolver(io), sock(io), timeout_s(timeout_s) {}

  void start(const store::Endpoint& ep) {
    resolver.async_resolve(ep.host, std::to_string(ep.port),
                           [self = shared_from_this()](auto ec, tcp::resolver::results_type r) {
                             if (!ec) self->connect(r);
                           });
  }
  void connect(const tcp::resolver::results_type& r) {
    asio::async_connect(sock, r, [self = shared_from_this()](auto ec, const tcp::endpoint&) {
      if (!ec) self->handshake();
    });
  }
  void handshake() {
    out = "CLIENT PROTOCOL 2\n";
    asio::async_write(sock, asio::buffer(out), [self = shared_from_this()](auto ec, size_t) {
      if (ec) return;
      asio::async_read_until(self->sock, self->in, '\n', [self](auto ec2, size_t n) {
        if (!ec2) self->answered(n);
      });
    });
  }
  void answered(size_t n) {
    std::string line(asio::buffers_begin(in.data()), asio::buffers_begin(in.data()) + n);
    in.consume(n);
    if (line.rfind("SERVER PROTOCOL ", 0) != 0) return;  // not NCCL's RAS
    is_ras = true;
    // Its collectives across the job's processes wait timeout_s for a leg.
    out = "TIMEOUT " + std::to_string(timeout_s) + "\nVERBOSE STATUS\n";
    asio::async_write(sock, asio::buffer(out), [self = shared_from_this()](auto ec, size_t) {
      if (!ec) self->read_status();
    });
  }
  void read_status() {
    asio::async_read(sock, in, asio::transfer_at_least(1),
                     [self = shared_from_this()](boost::system::error_code ec, size_t) {
                       if (ec == asio::error::eof) {
                         self->complete = true;
                         return;
                       }
                       if (!ec) self->read_status();
                     });
  }

  tcp::resolver resolver;
  tcp::socket sock;
  int timeout_s;
  std::string out;
  asio::streambuf in;
  bool is_ras = false, complete = false;
};

}  // namespace

std::string default_nccl_ras_address() { return "localhost:" + std::to_string(kRasPort); }

std::string nccl_ras_status(const std::string& address, std::chrono::milliseconds timeout) {
  store::Endpoint ep;
  try {
    ep = store::parse_endpoint(address, kRasPort);
  } catch (const std::exception&) {
    return "";
  }
  asio::io_context io;
  int leg_s = std::max(1, int(timeout.count() / 2000));  // half the deadline, in seconds
  auto x = std::make_shared<RasExchange>(io, leg_s);
  x->start(ep);
  io.run_for(timeout);
  if (!x->is_ras) return "";
  std::string text(asio::buffers_begin(x->in.data()), asio::buffers_end(x->in.data()));
  if (text.rfind("OK\n", 0) == 0) text.erase(0, 3);  // TIMEOUT's answer
  if (!x->complete) text += "\n(ccrun: the status was cut at the deadline)\n";
  return text;
}

}  // namespace ccrun::agent
