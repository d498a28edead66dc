//===- etcd_tls.h - TLS to etcd, through the etcd_tls module ----*- C++ -*-===//
//
// EtcdConnection speaks HTTP/1.1 over a plain socket or over TLS. The TLS
// side (OpenSSL, through Asio's ssl streams) lives in the module
// libccrun_etcd_tls.so (module_loader.h), loaded when a store is opened with
// etcd_tls=1, so that no other job maps OpenSSL. Across the module's edge
// only these two interfaces pass, with no OpenSSL type in them:
//
//   auto tls = make_tls_client(options);             // loads CA, cert, key
//   TlsStream s(tcp, tls->session(tcp, "etcd-1"));   // checks the name, SNI
//   http::async_write(s, request, handler);          // a Beast stream
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "ccrun/etcd_store.h"

namespace ccrun::store::etcd {

// One TLS client session over a connected tcp_stream; its operations run on
// that stream's io_context and complete through it.
class TlsSession {
 public:
  using Done = std::function<void(boost::system::error_code, std::size_t)>;
  virtual ~TlsSession() = default;
  virtual void async_handshake(Done done) = 0;
  virtual void async_read_some(boost::asio::mutable_buffer into, Done done) = 0;
  virtual void async_write_some(boost::asio::const_buffer from, Done done) = 0;
};

// The client side of TLS for one store: its CA, certificate and key, loaded
// once.
class TlsClient {
 public:
  virtual ~TlsClient() = default;
  // A session over `lower` (connected, not yet shaken hands) that asks for
  // `host` (SNI) and accepts only a certificate naming it.
  virtual std::unique_ptr<TlsSession> session(boost::beast::tcp_stream& lower,
                                              const std::string& host) = 0;
};

// Loads the module and the TLS files `o` names. Throws ConfigError for a
// file that cannot be read, ccrun::Error when the module is missing.
std::unique_ptr<TlsClient> make_tls_client(const EtcdStoreOptions& o);

// An error code from the module as this side's: Beast and Asio keep their
// error categories in function-local objects of their headers, so the
// module has its own copies, and `ec == beast::error::timeout` (or Beast's
// own test for asio::error::eof) would fail for the module's codes. Codes
// of those categories are remade with this side's; others (OpenSSL's) only
// give their message.
boost::system::error_code from_module(boost::system::error_code ec);

// The module's entry point (extern "C", found by name).
using MakeTlsClient = TlsClient* (*)(const EtcdStoreOptions*);
inline constexpr const char* kMakeTlsClientSymbol = "ccrun_etcd_tls_client";

// A session as a Beast AsyncStream, for http::async_read/async_write: each
// operation moves the first non-empty buffer of the sequence (a stream may
// move fewer bytes than offered; Beast loops).
class TlsStream {
 public:
  using executor_type = boost::beast::tcp_stream::executor_type;

  TlsStream(boost::beast::tcp_stream& lower, std::unique_ptr<TlsSession> session)
      : lower_(lower), session_(std::move(session)) {}
  executor_type get_executor() { return lower_.get_executor(); }
  template <typename Handler>  // void(error_code, ...)
  void async_handshake(Handler handler) {
    session_->async_handshake([handler](boost::system::error_code ec, std::size_t n) mutable {
      handler(from_module(ec), n);
    });
  }

  template <typename Buffers, typename Handler>
  auto async_read_some(const Buffers& buffers, Handler&& handler) {
    return start<Handler>(first_of<boost::asio::mutable_buffer>(buffers), std::forward<Handler>(handler),
                          [this](auto b, auto done) { session_->async_read_some(b, std::move(done)); });
  }
  template <typename Buffers, typename Handler>
  auto async_write_some(const Buffers& buffers, Handler&& handler) {
    return start<Handler>(first_of<boost::asio::const_buffer>(buffers), std::forward<Handler>(handler),
                          [this](auto b, auto done) { session_->async_write_some(b, std::move(done)); });
  }

 private:
  template <typename Buffer, typename Buffers>
  static Buffer first_of(const Buffers& buffers) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      Buffer b(*it);
      if (b.size() > 0) return b;
    }
    return Buffer();
  }
  // Runs `op(buffer, done)`; an empty buffer completes at once (posted).
  template <typename Handler, typename Buffer, typename Op>
  auto start(Buffer buffer, Handler&& handler, Op op) {
    return boost::asio::async_initiate<Handler, void(boost::system::error_code, std::size_t)>(
        [this, buffer, op](auto h) {
          // Beast's handlers move but do not copy; std::function copies.
          auto held = std::make_shared<decltype(h)>(std::move(h));
          TlsSession::Done done = [held](boost::system::error_code ec, std::size_t n) {
            (*held)(from_module(ec), n);
          };
          if (buffer.size() == 0) {
            boost::asio::post(lower_.get_executor(), [done] { done({}, 0); });
          } else {
            op(buffer, std::move(done));
          }
        },
        handler);
  }

  boost::beast::tcp_stream& lower_;
  std::unique_ptr<TlsSession> session_;
};

}  // namespace ccrun::store::etcd
