// EtcdConnection: HTTP/1.1 to etcd's v3 JSON gateway with fail-over (see
// etcd_connection.h).
#include "etcd_connection.h"

#include <unistd.h>

#include <cstring>
#include <limits>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http.hpp>

#include "module_loader.h"
#include "store_util.h"
#include "ccrun/endpoint.h"

namespace ccrun::store::etcd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
using tcp = asio::ip::tcp;

// gRPC status codes the gateway returns in its error replies.
constexpr int kGrpcInvalidArgument = 3;
constexpr int kGrpcPermissionDenied = 7;
constexpr int kGrpcUnavailable = 14;
constexpr int kGrpcUnauthenticated = 16;

namespace {

std::string endpoint_name(const EtcdEndpoint& ep) { return format_host_port(ep.host, ep.port); }

constexpr const char* kReachHint =
    "check that etcd runs, that the endpoints list its client URLs, and that TLS is on "
    "(etcd_tls=1, etcd_ca=...) exactly when the members serve https";

}  // namespace

ClientState::ClientState(const EtcdStoreOptions& o) : options(o) {
  if (o.tls) tls = make_tls_client(o);
}

error_code from_module(error_code ec) {
  for (const auto* here : {&make_error_code(beast::error::timeout).category(),
                           &asio::error::get_misc_category()}) {
    if (&ec.category() != here && std::strcmp(ec.category().name(), here->name()) == 0) {
      return error_code(ec.value(), *here);
    }
  }
  return ec;
}

std::unique_ptr<TlsClient> make_tls_client(const EtcdStoreOptions& o) {
  auto make = reinterpret_cast<MakeTlsClient>(module_symbol("etcd_tls", kMakeTlsClientSymbol));
  return std::unique_ptr<TlsClient>(make(&o));
}

EtcdConnection::EtcdConnection(std::shared_ptr<ClientState> state)
    : state_(std::move(state)), member_(state_->member.load()) {
  if (state_->options.interrupt) {
    int fd = ::dup(state_->options.interrupt->fd());
    if (fd < 0) throw Error("etcd store: dup of the interrupt descriptor failed");
    interrupt_.emplace(ioc_, fd);
  }
}

EtcdConnection::~EtcdConnection() { close(); }

std::string EtcdConnection::member_name() const {
  return endpoint_name(state_->options.endpoints[member_]);
}

beast::tcp_stream& EtcdConnection::lowest() {
  return *tcp_;
}

void EtcdConnection::close() {
  if (tcp_) {
    error_code ignored;  // closing a socket that may be broken already
    lowest().socket().close(ignored);
  }
  tls_.reset();
  tcp_.reset();
  buffer_.clear();
  connected_ = false;
  reused_ = false;
}

void EtcdConnection::next_member() {
  close();
  member_ = (member_ + 1) % state_->options.endpoints.size();
}

// Runs one asynchronous operation to completion on this connection's
// io_context: `start(handler)` begins it. The socket's timer ends it at
// `deadline` (beast::error::timeout); the interrupt cancels it.
template <typename Start>
error_code EtcdConnection::run(Start&& start, Clock::time_point deadline) {
  auto& interrupt = state_->options.interrupt;
  if (interrupt && interrupt->triggered()) {
    close();
    throw InterruptedError("etcd store " + member_name() + ": call interrupted (stopping)");
  }
  error_code result = asio::error::would_block;
  bool done = false;
  bool interrupted = false;
  lowest().expires_at(deadline);
  start([&](error_code ec, auto&&...) {
    result = ec;
    done = true;
    if (interrupt_) interrupt_->cancel();
  });
  if (interrupt_) {
    interrupt_->async_wait(asio::posix::descriptor_base::wait_read,
                           [&](error_code ec) {
                             if (ec || done) return;
                             interrupted = true;
                             lowest().cancel();
                           });
  }
  ioc_.restart();
  ioc_.run();
  if (interrupted) {
    close();
    throw InterruptedError("etcd store " + member_name() + ": call interrupted (stopping)");
  }
  return result;
}

error_code EtcdConnection::connect_one(const EtcdEndpoint& ep,
                                       Clock::time_point deadline) {
  close();
  error_code ec;
  tcp::resolver resolver(ioc_);
  auto results = resolver.resolve(ep.host, std::to_string(ep.port), ec);
  if (ec) return ec;
  tcp_.emplace(ioc_);
  if (state_->tls) tls_.emplace(*tcp_, state_->tls->session(*tcp_, ep.host));
  ec = run([&](auto handler) { lowest().async_connect(results, handler); }, deadline);
  if (!ec && tls_) {
    ec = run([&](auto handler) { tls_->async_handshake(handler); }, deadline);
  }
  if (!ec) lowest().socket().set_option(tcp::no_delay(true), ec);
  if (ec) close();
  connected_ = !ec;
  return ec;
}

void EtcdConnection::backoff(int round, Clock::time_point give_up) {
  auto pause = std::chrono::milliseconds(std::min(50 << std::min(round, 4), 1000));
  pause_until(std::min(Clock::now() + pause, give_up));
}

void EtcdConnection::pause_until(Clock::time_point until) {
  // A pause the interrupt ends early: a timer beside the interrupt's
  // descriptor on this connection's io_context.
  asio::steady_timer timer(ioc_, until);
  bool interrupted = false;
  timer.async_wait([&](error_code) {
    if (interrupt_) interrupt_->cancel();
  });
  if (interrupt_) {
    interrupt_->async_wait(asio::posix::descriptor_base::wait_read, [&](error_code ec) {
      if (ec) return;
      interrupted = true;
      timer.cancel();
    });
  }
  ioc_.restart();
  ioc_.run();
  if (interrupted) throw InterruptedError("etcd store: call interrupted (stopping)");
}

void EtcdConnection::connect(Clock::time_point give_up, Clock::time_point deadline) {
  if (connected_) return;
  const auto& eps = state_->options.endpoints;
  member_ = state_->member.load() % eps.size();
  std::string errors, cause;  // the last error; the last that was not a timeout
  for (int round = 0;; ++round) {
    for (size_t i = 0; i < eps.size(); ++i) {
      auto now = Clock::now();
      auto until = std::min({now + state_->options.request_timeout, deadline});
      error_code ec = connect_one(eps[member_], until);
      if (!ec) {
        state_->member.store(member_);
        return;
      }
      errors = endpoint_name(eps[member_]) + ": " + ec.message();
      if (ec != beast::error::timeout) cause = errors;
      next_member();
      if (Clock::now() >= std::min(give_up, deadline)) {
        throw ConnectionError(
            "etcd store: no member of " + std::to_string(eps.size()) +
            " answered within " +
            format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(
                state_->options.connect_timeout)) +
            " (" + (cause.empty() ? errors : cause) + "); " + kReachHint);
      }
    }
    backoff(round, std::min(give_up, deadline));
  }
}

error_code EtcdConnection::exchange(const std::string& target, const std::string& body,
                                    Reply& reply, Clock::time_point deadline) {
  http::request<http::string_body> req{http::verb::post, target, 11};
  const auto& ep = state_->options.endpoints[member_];
  req.set(http::field::host, endpoint_name(ep));
  req.set(http::field::content_type, "application/json");
  std::string tok = token();
  if (!tok.empty()) req.set(http::field::authorization, tok);
  req.keep_alive(true);
  req.body() = body;
  req.prepare_payload();
  auto write = [&](auto& s) {
    return run([&](auto h) { http::async_write(s, req, h); }, deadline);
  };
  error_code ec = tls_ ? write(*tls_) : write(*tcp_);
  if (ec) return ec;
  http::response_parser<http::string_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  auto read = [&](auto& s) {
    return run([&](auto h) { http::async_read(s, buffer_, parser, h); }, deadline);
  };
  ec = tls_ ? read(*tls_) : read(*tcp_);
  if (ec) return ec;
  reply.status = parser.get().result_int();
  reply.body = std::move(parser.get().body());
  if (!parser.get().keep_alive()) close();
  reused_ = true;
  return {};
}

std::string EtcdConnection::local_address() {
  auto give_up = Clock::now() + state_->options.connect_timeout;
  connect(give_up, give_up);
  error_code ec;
  auto ep = lowest().socket().local_endpoint(ec);
  if (ec) {
    throw ConnectionError("etcd store " + member_name() + ": cannot read this end's address: " +
                          ec.message());
  }
  return ep.address().to_string();
}

std::string EtcdConnection::token() {
  std::lock_guard lock(state_->mu);
  return state_->token;
}

// Error replies of the gateway: {"error": "...", "code": N, "message": "..."}.
json EtcdConnection::post(const std::string& target, const json& body, bool idempotent) {
  const auto& o = state_->options;
  auto give_up = Clock::now() + o.connect_timeout;
  const std::string text = body.dump();
  bool reauthenticated = false;
  std::string last;
  for (int round = 0;; ++round) {
    if (Clock::now() >= give_up) {
      throw ConnectionError("etcd store: " + target + " got no answer from any member within " +
                            format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(
                                o.connect_timeout)) +
                            " (last: " + last + "); " + kReachHint);
    }
    if (round > 0 && round % o.endpoints.size() == 0) {
      backoff(static_cast<int>(round / o.endpoints.size()), give_up);
    }
    connect(give_up, give_up);
    if (!o.user.empty() && token().empty()) authenticate(give_up);
    bool was_reused = reused_;
    Reply reply;
    error_code ec = exchange(target, text, reply, Clock::now() + o.request_timeout);
    if (ec) {
      last = member_name() + ": " + ec.message();
      // A kept-alive connection the member closed while idle: same member.
      if (was_reused && ec != beast::error::timeout) {
        close();
      } else {
        next_member();
      }
      if (!idempotent) throw AmbiguousError("etcd store: " + target + " to " + last);
      continue;
    }
    if (reply.status == 200) {
      try {
        return json::parse(reply.body);
      } catch (const json::exception& e) {
        throw ProtocolError("etcd store " + member_name() + ": " + target +
                            " replied with invalid JSON: " + e.what());
      }
    }
    json err = json::parse(reply.body, nullptr, false);
    int code = err.is_object() ? static_cast<int>(int_field(err, "code")) : 0;
    std::string message = err.is_object() && err.contains("message")
                              ? err["message"].get<std::string>()
                              : reply.body.substr(0, 200);
    last = member_name() + ": " + message;
    if (code == kGrpcUnauthenticated && !o.user.empty() && !reauthenticated) {
      reauthenticated = true;  // the token expired: get a new one
      {
        std::lock_guard lock(state_->mu);
        state_->token.clear();
      }
      continue;
    }
    if (code == kGrpcUnavailable) {  // no leader, leader changed, timed out
      next_member();
      if (!idempotent) throw AmbiguousError("etcd store: " + target + " to " + last);
      continue;
    }
    // etcd sends "user name is empty" (InvalidArgument) to a client without
    // credentials once auth is on; that exact text is etcd's constant
    // ErrGRPCUserEmpty, the only thing telling it from other bad arguments.
    bool no_user = code == kGrpcInvalidArgument && message == "etcdserver: user name is empty";
    if (code == kGrpcPermissionDenied || code == kGrpcUnauthenticated || no_user) {
      throw AuthError("etcd store " + member_name() + ": " + target + " denied: " + message +
                      "; give a user with read/write access to prefix \"" + o.prefix +
                      "\" (--rdzv-conf etcd_user=...,etcd_password=...)");
    }
    throw GrpcError("etcd store " + member_name() + ": " + target + " failed (HTTP " +
                        std::to_string(reply.status) + ", gRPC code " + std::to_string(code) +
                        "): " + message,
                    code);
  }
}

void EtcdConnection::authenticate(Clock::time_point give_up) {
  const auto& o = state_->options;
  json body{{"name", o.user}, {"password", o.password}};
  for (;;) {
    Reply reply;
    error_code ec = exchange("/v3/auth/authenticate", body.dump(), reply,
                             Clock::now() + o.request_timeout);
    if (ec) {
      next_member();
      connect(give_up, give_up);
      continue;
    }
    json j = json::parse(reply.body, nullptr, false);
    if (reply.status == 200 && j.is_object() && j.contains("token")) {
      std::lock_guard lock(state_->mu);
      state_->token = j["token"].get<std::string>();
      return;
    }
    int code = j.is_object() ? static_cast<int>(int_field(j, "code")) : 0;
    std::string message = j.is_object() && j.contains("message")
                              ? j["message"].get<std::string>()
                              : reply.body.substr(0, 200);
    if (code == kGrpcInvalidArgument || code == kGrpcPermissionDenied ||
        code == kGrpcUnauthenticated || code == 9 /* auth not enabled */) {
      throw AuthError("etcd store " + member_name() + ": authentication of user \"" +
                      o.user + "\" failed: " + message +
                      "; check etcd_user/etcd_password and that `etcdctl auth enable` was run");
    }
    throw Error("etcd store " + member_name() + ": /v3/auth/authenticate failed: " + message);
  }
}

StreamEnd EtcdConnection::stream(const std::string& target, const json& body,
                                 Clock::time_point deadline,
                                 const std::function<bool(const json&)>& on_message) {
  const auto& o = state_->options;
  connect(Clock::now() + o.connect_timeout, deadline);
  if (!o.user.empty() && token().empty()) authenticate(Clock::now() + o.connect_timeout);
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, member_name());
  req.set(http::field::content_type, "application/json");
  std::string tok = token();
  if (!tok.empty()) req.set(http::field::authorization, tok);
  req.body() = body.dump();
  req.prepare_payload();

  http::response_parser<http::string_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  std::string pending;
  std::vector<std::string> lines;
  auto on_chunk = [&](std::uint64_t, beast::string_view data, error_code&) {
    pending.append(data.data(), data.size());
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      if (nl > 0) lines.push_back(pending.substr(0, nl));
      pending.erase(0, nl + 1);
    }
    return static_cast<std::uint64_t>(data.size());
  };
  parser.on_chunk_body(on_chunk);  // the parser keeps a reference
  auto ended = [&](error_code ec) {
    // The socket's only timer is `deadline`.
    StreamEnd end = ec == beast::error::timeout ? StreamEnd::kTimedOut : StreamEnd::kBroken;
    if (end == StreamEnd::kBroken) {
      next_member();  // it broke: the next try goes elsewhere
    } else {
      close();
    }
    return end;
  };
  auto write = [&](auto& s) { return run([&](auto h) { http::async_write(s, req, h); }, deadline); };
  if (error_code ec = tls_ ? write(*tls_) : write(*tcp_)) return ended(ec);
  auto read_header = [&](auto& s) {
    return run([&](auto h) { http::async_read_header(s, buffer_, parser, h); }, deadline);
  };
  if (error_code ec = tls_ ? read_header(*tls_) : read_header(*tcp_)) return ended(ec);
  auto read_some = [&](auto& s) {
    return run([&](auto h) { http::async_read_some(s, buffer_, parser, h); }, deadline);
  };
  if (parser.get().result_int() != 200) {
    auto read_all = [&](auto& s) {
      return run([&](auto h) { http::async_read(s, buffer_, parser, h); }, deadline);
    };
    error_code ec = tls_ ? read_all(*tls_) : read_all(*tcp_);
    std::string text = pending + parser.get().body();
    close();
    if (ec) return ended(ec);
    throw Error("etcd store " + member_name() + ": " + target + " failed (HTTP " +
                std::to_string(parser.get().result_int()) + "): " + text.substr(0, 300));
  }
  for (;;) {
    for (size_t i = 0; i < lines.size(); ++i) {
      json m = json::parse(lines[i], nullptr, false);
      if (m.is_discarded()) {
        close();
        throw ProtocolError("etcd store " + member_name() + ": " + target +
                            " streamed invalid JSON: " + lines[i].substr(0, 200));
      }
      if (m.contains("error")) {
        lines.clear();
        next_member();  // e.g. the member lost its leader: read state again
        return StreamEnd::kBroken;
      }
      bool done = false;
      try {
        done = on_message(m);
      } catch (...) {
        close();  // the stream is half read: drop it, then report
        throw;
      }
      if (done) {
        close();
        return StreamEnd::kDone;
      }
    }
    lines.clear();
    if (parser.is_done()) {
      close();
      return StreamEnd::kBroken;
    }
    if (error_code ec = tls_ ? read_some(*tls_) : read_some(*tcp_)) return ended(ec);
  }
}

}  // namespace ccrun::store::etcd
