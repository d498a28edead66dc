//===- etcd_connection.h - One HTTP/1.1 connection to etcd's gateway -*- C++ -*-=//
//
// `EtcdConnection` sends JSON requests to etcd's v3 gateway (POST
// /v3/kv/range, ...) over one keep-alive connection, plain or TLS, moving to
// the next member of the cluster when the current one refuses, breaks or
// does not answer in time. Blocking, with deadlines: each exchange runs the
// connection's own io_context until it completes, its timer fires, or the
// StoreInterrupt becomes readable. Not thread-safe: EtcdStore lends each
// connection to one thread at a time.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <nlohmann/json.hpp>

#include "ccrun/error.h"
#include "ccrun/etcd_store.h"
#include "etcd_tls.h"

namespace ccrun::store::etcd {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

std::string base64_encode(const std::string& bytes);
std::string base64_decode(const std::string& text);  // throws ProtocolError
// An int64 field of a gateway reply (sent as a decimal string; absent = 0).
int64_t int_field(const json& j, const char* name);

// The request may or may not have been applied: it was sent, and the member
// broke or answered "unavailable" before confirming it.
class AmbiguousError : public ConnectionError {
 public:
  using ConnectionError::ConnectionError;
};

// etcd answered with an error status (gRPC `code`, e.g. 5 = not found).
class GrpcError : public Error {
 public:
  GrpcError(const std::string& what, int code) : Error(what), code(code) {}
  const int code;
};

// What the connections of one EtcdStore share.
struct ClientState {
  explicit ClientState(const EtcdStoreOptions& o);
  const EtcdStoreOptions& options;             // owned by the EtcdStore
  std::unique_ptr<TlsClient> tls;  // null without TLS (etcd_tls.h)
  std::atomic<size_t> member{0};  // index of the member that answered last
  std::mutex mu;
  std::string token;  // guarded by mu; empty without authentication
};

// How a watch-like streamed reply ended.
enum class StreamEnd {
  kDone,      // on_message returned true
  kTimedOut,  // the deadline passed first
  kBroken,    // the member closed or broke the stream: read state again
};

class EtcdConnection {
 public:
  explicit EtcdConnection(std::shared_ptr<ClientState> state);
  ~EtcdConnection();
  EtcdConnection(const EtcdConnection&) = delete;  // owns a socket

  // POSTs `body` to `target` (e.g. "/v3/kv/range") and returns the reply.
  // Fails over between members until connect_timeout. When the request
  // may have been applied and then broke, an `idempotent` request is sent
  // again, any other throws AmbiguousError. A reply with an error throws
  // ccrun::Error (AuthError for credentials), naming member and message.
  json post(const std::string& target, const json& body, bool idempotent);

  // POSTs `body` to a streaming endpoint (/v3/watch) and hands each message
  // to `on_message` until it returns true, `deadline` passes or the stream
  // breaks. The connection is closed afterwards (the server's stream ends).
  StreamEnd stream(const std::string& target, const json& body,
                   Clock::time_point deadline,
                   const std::function<bool(const json&)>& on_message);

  // Sleeps until `until`; throws InterruptedError when interrupted.
  void pause_until(Clock::time_point until);

  // This end's IP address on a connection to a member (connects first).
  std::string local_address();

  // "host:port" of the member in use (for messages).
  std::string member_name() const;

  // Drops the connection (the next request reconnects).
  void close();

 private:
  struct Reply {
    unsigned status = 0;
    std::string body;
  };
  template <typename Start>
  boost::system::error_code run(Start&& start, Clock::time_point deadline);
  boost::beast::tcp_stream& lowest();
  // Connects to the preferred member, moving on to the next on failure,
  // until `give_up`; throws ConnectionError then.
  void connect(Clock::time_point give_up, Clock::time_point deadline);
  boost::system::error_code connect_one(const EtcdEndpoint& ep,
                                        Clock::time_point deadline);
  // One request and its whole reply on the open connection.
  boost::system::error_code exchange(const std::string& target,
                                     const std::string& body, Reply& reply,
                                     Clock::time_point deadline);
  void authenticate(Clock::time_point give_up);
  void next_member();
  // Pause before another round of the members (interruptible).
  void backoff(int round, Clock::time_point give_up);
  std::string token();

  std::shared_ptr<ClientState> state_;
  boost::asio::io_context ioc_;
  std::optional<boost::beast::tcp_stream> tcp_;
  std::optional<TlsStream> tls_;  // over tcp_, with TLS
  std::optional<boost::asio::posix::stream_descriptor> interrupt_;
  boost::beast::flat_buffer buffer_;
  size_t member_ = 0;     // index into options.endpoints
  bool connected_ = false;
  bool reused_ = false;   // the connection served a request before
};

}  // namespace ccrun::store::etcd
