// StoreServer: the listener and the thread that serve the store's sessions
// (see include/ccrun/store_server.h; the per-connection logic is in
// store_session.cpp, the data in key_table.cpp).
#include "ccrun/endpoint.h"
#include "ccrun/store_server.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <utility>  // boost 1.74 asio uses std::exchange without it
#include <boost/asio.hpp>
#include <algorithm>
#include <future>
#include <thread>
#include <vector>

#include "ccrun/error.h"
#include "store_session.h"

namespace ccrun::store {
namespace asio = boost::asio;
using asio::ip::tcp;

uint64_t raise_open_file_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur;
}

namespace {

// File descriptors kept free for the server's own use (the listener, logs,
// the resolver) when the connection limit is derived from RLIMIT_NOFILE.
constexpr uint64_t kFdMargin = 64;

// How long accepting pauses when the process is out of file descriptors.
constexpr std::chrono::milliseconds kAcceptPause{200};

bool out_of_descriptors(const boost::system::error_code& ec) {
  return ec == asio::error::no_descriptors || ec.value() == ENFILE ||
         ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
}

}  // namespace

class StoreServer::Impl {
 public:
  explicit Impl(StoreServerOptions options)
      : options_(std::move(options)), ctx_(io_, options_.finished_job_ttl) {
    ctx_.limits.max_key_bytes = options_.max_key_bytes;
    ctx_.limits.max_value_bytes = options_.max_value_bytes;
    ctx_.limits.max_keys_per_request = options_.max_keys_per_request;
    ctx_.token = options_.token;
    ctx_.max_pending_output = options_.max_pending_output_bytes;
    ctx_.handshake_timeout = options_.token.empty() ? options_.first_request_timeout
                                                    : options_.handshake_timeout;
    ctx_.idle_timeout = options_.idle_timeout;
    ctx_.max_waits_per_session = options_.max_waits_per_connection;
  }

  void bind() {
    if (bound_) return;
    set_connection_limit(raise_open_file_limit());
    std::string where = format_host_port(options_.host, options_.port);
    boost::system::error_code ec;
    tcp::endpoint endpoint;
    auto address = asio::ip::make_address(options_.host, ec);
    if (!ec) {
      endpoint = tcp::endpoint(address, options_.port);
    } else {
      tcp::resolver resolver(io_);
      auto results = resolver.resolve(options_.host, std::to_string(options_.port),
                                       tcp::resolver::passive, ec);
      if (ec || results.empty()) {
        throw Error("store server: cannot resolve host \"" + options_.host +
                    "\": " + ec.message() + "; give an address such as 0.0.0.0");
      }
      endpoint = results.begin()->endpoint();
    }
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (ec) {
      acceptor_.close();
      std::string hint = ec == asio::error::address_in_use
                             ? "another process listens there; " + options_.port_in_use_fix
                             : ec == boost::system::errc::address_not_available
                                   ? "that address is not one of this host's"
                                   : "check the address and port";
      throw Error("store server: cannot listen on " + where + ": " +
                  ec.message() + " (" + hint + ")");
    }
    acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      throw Error("store server: cannot listen on " + where + ": " + ec.message());
    }
    port_ = acceptor_.local_endpoint().port();
    bound_ = true;
    do_accept();
  }

  void start() {
    bind();
    thread_ = std::thread([this] { serve(); });
  }

  void run() {
    bind();
    serve();
  }

  void stop() {
    if (!bound_ || stopped_.exchange(true)) return;
    asio::post(io_, [this] { shutdown(); });
    if (thread_.joinable()) thread_.join();
  }

  uint16_t port() const { return port_; }

  // Reads a value that lives on the serving thread.
  template <typename F>
  size_t query(F f) {
    if (!serving_.load()) return f();
    std::promise<size_t> result;
    auto future = result.get_future();
    asio::post(io_, [&] { result.set_value(f()); });
    if (future.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      return 0;
    }
    return future.get();
  }

  ServerContext& ctx() { return ctx_; }
  size_t max_connections() const { return max_connections_; }

 private:
  void serve() {
    serving_ = true;
    io_.run();
    serving_ = false;
  }

  // The connection limit: options_.max_connections, or (0) what the
  // open-file limit allows.
  void set_connection_limit(uint64_t nofile) {
    uint64_t by_fds = nofile > 2 * kFdMargin ? nofile - kFdMargin : nofile / 2;
    if (options_.max_connections == 0) {
      max_connections_ = static_cast<size_t>(std::min<uint64_t>(65536, by_fds));
    } else {
      max_connections_ = options_.max_connections;
      if (nofile > 0 && max_connections_ > by_fds) {
        spdlog::warn("store server: --max-connections {} is over what the open-file "
                     "limit allows ({} descriptors, so about {} connections); past "
                     "that, accepting pauses until connections close (raise "
                     "`ulimit -n` or lower --max-connections)",
                     max_connections_, nofile, by_fds);
      }
    }
    ctx_.silent_close_above = max_connections_ / 4 * 3;
  }

  void do_accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) {
        on_accept_error(ec);
        return;
      }
      if (accept_failures_ > 0) {
        spdlog::info("store server: accepting connections again ({} accept "
                     "attempt(s) failed while out of file descriptors)", accept_failures_);
        accept_failures_ = 0;
      }
      if (ctx_.num_sessions >= max_connections_) {
        boost::system::error_code ignored;
        auto peer = socket.remote_endpoint(ignored);
        if (ctx_.bad_input_log.allow()) {
          spdlog::warn("store server: refusing connection from {}: {} "
                       "connections open, limit {} (raise --max-connections)",
                       format_host_port(peer.address().to_string(), peer.port()),
                       ctx_.num_sessions, max_connections_);
        }
        socket.close(ignored);
      } else {
        std::make_shared<StoreSession>(std::move(socket), ctx_)->start();
      }
      do_accept();
    });
  }

  // Out of file descriptors: pause accepting (the connection waits in the
  // listen backlog) and retry on a timer, saying so once, not per attempt.
  void on_accept_error(const boost::system::error_code& ec) {
    if (!out_of_descriptors(ec)) {
      if (ctx_.bad_input_log.allow()) {
        spdlog::warn("store server: accept failed: {}", ec.message());
      }
      do_accept();
      return;
    }
    if (accept_failures_++ == 0) {
      rlimit lim{};
      getrlimit(RLIMIT_NOFILE, &lim);
      spdlog::warn("store server: cannot accept connections: {} ({} connections "
                   "open, open-file limit {}); pausing accepts, retrying every {} ms "
                   "until connections close (lower --max-connections or raise `ulimit -n`)",
                   ec.message(), ctx_.num_sessions, uint64_t(lim.rlim_cur),
                   kAcceptPause.count());
    }
    retry_.expires_after(kAcceptPause);
    retry_.async_wait([this](boost::system::error_code tec) {
      if (!tec) do_accept();
    });
  }

  void shutdown() {
    boost::system::error_code ec;
    acceptor_.close(ec);
    retry_.cancel();
    std::vector<StoreSession*> open(ctx_.sessions.begin(), ctx_.sessions.end());
    for (StoreSession* s : open) s->close();
    io_.stop();
  }

  StoreServerOptions options_;
  asio::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  asio::steady_timer retry_{io_};
  ServerContext ctx_;
  size_t max_connections_ = 0;
  uint64_t accept_failures_ = 0;  // in a row, while out of descriptors
  std::thread thread_;
  bool bound_ = false;
  uint16_t port_ = 0;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> serving_{false};
};

StoreServer::StoreServer(StoreServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

StoreServer::~StoreServer() { stop(); }

void StoreServer::bind() { impl_->bind(); }
void StoreServer::start() { impl_->start(); }
void StoreServer::run() { impl_->run(); }
void StoreServer::stop() { impl_->stop(); }
uint16_t StoreServer::port() const { return impl_->port(); }

size_t StoreServer::num_connections() const {
  return impl_->query([this] { return impl_->ctx().num_sessions; });
}

size_t StoreServer::max_connections() const { return impl_->max_connections(); }

size_t StoreServer::num_keys() const {
  return impl_->query([this] { return impl_->ctx().table.size(); });
}

size_t StoreServer::erase_keys_outside(std::string_view keep) {
  return impl_->query([this, keep] { return impl_->ctx().table.erase_if_not_prefix(keep); });
}

}  // namespace ccrun::store
