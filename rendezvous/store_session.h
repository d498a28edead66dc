//===- store_session.h - One client connection of the store server -*- C++ -*-//
//
// A `StoreSession` owns one client's socket and moves through short steps,
// as in Asio's chat_server example: read (a small first buffer, then what
// else is there) -> parse and handle each whole request -> queue replies -> write.
// A request that blocks (WAIT, GET or MULTI_GET of missing keys) parks the
// session on its keys; later requests wait behind it, except CANCEL_WAIT.
// Any protocol error closes this session only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <utility>  // boost 1.74 asio uses std::exchange without it
#include <boost/asio.hpp>
#include <array>
#include <memory>
#include <string>
#include <unordered_set>

#include "key_table.h"
#include "wire_protocol.h"

namespace ccrun::rendezvous {

// What every session of one server shares. Owned by the server; used from
// its one thread only.
struct ServerContext {
  KeyTable table;
  wire::Limits limits;
  std::string token;              // empty = no authentication
  size_t max_pending_output = 0;  // bytes of unsent replies before pausing
  size_t num_sessions = 0;
  std::unordered_set<class StoreSession*> sessions;  // open ones
};

class StoreSession : public std::enable_shared_from_this<StoreSession> {
 public:
  StoreSession(boost::asio::ip::tcp::socket socket, ServerContext& ctx);
  ~StoreSession();
  StoreSession(const StoreSession&) = delete;  // owns a socket
  StoreSession& operator=(const StoreSession&) = delete;

  // Starts reading. The session keeps itself alive through its handlers.
  void start();

  // Closes the socket and cancels a parked wait. Idempotent.
  void close();

  bool closed() const { return closed_; }

 private:
  void do_read();
  void on_read(const boost::system::error_code& ec, size_t n);
  // Parses and handles requests from `in_`; stops when one blocks.
  void process();
  void handle(wire::Request& req);
  void park(wire::Request& req);
  void on_wait_ready();
  void reply_parked();
  void cancel_wait();
  void flush();
  void on_written(const boost::system::error_code& ec);
  // True while the session must not read: too many unsent replies, or a
  // parked request with much buffered behind it.
  bool paused() const;
  void fail(const std::string& why);

  boost::asio::ip::tcp::socket socket_;
  ServerContext& ctx_;
  std::string peer_;  // "10.0.0.3:51234", for log lines

  wire::Dialect dialect_ = wire::Dialect::kUnknown;
  bool authenticated_ = false;
  bool closed_ = false;
  bool reading_ = false;         // a read is armed
  bool write_in_flight_ = false;
  bool close_after_flush_ = false;  // authentication was denied

  std::array<char, 256> first_;  // what each read receives first
  std::string in_;       // bytes received and not yet parsed
  size_t in_needed_ = 0; // parse again only once in_ has this many bytes
  std::string out_;      // replies not yet handed to the socket
  std::string writing_;  // the buffer of the write in flight
  wire::Request req_;    // reused across requests

  // The parked request, if any.
  std::shared_ptr<KeyWaiter> waiter_;
  wire::Request parked_;
};

}  // namespace ccrun::rendezvous
