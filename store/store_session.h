//===- store_session.h - One client connection of the store server -*- C++ -*-//
//
// A `StoreSession` owns one client's socket and moves through short steps,
// as in Asio's chat_server example: read (a small first buffer, then what
// else is there) -> parse and handle each whole request -> queue replies ->
// write. Requests are answered in order, except WAIT: a WAIT whose keys are
// not all present is parked on them and the session goes on with the
// requests behind it; its STOP_WAITING byte is sent whenever the keys
// appear, between later replies, as torch's own servers do (a torch 1.13
// client whose wait timed out relies on this; a 2.x client sends
// CANCEL_WAIT). Any protocol error closes this session only.
//
// Bounds, per session: unsent replies (parsing stops while they exceed
// max_pending_output, and resumes once the client has read them); bytes
// from a client that has not authenticated yet (only the handshake's); a
// handshake deadline; an optional idle deadline; parked WAITs.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <utility>  // boost 1.74 asio uses std::exchange without it
#include <boost/asio.hpp>
#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "finished_jobs.h"
#include "key_table.h"
#include "log_limiter.h"
#include "wire_protocol.h"

namespace ccrun::store {

// What every session of one server shares. Owned by the server; used from
// its one thread only.
struct ServerContext {
  // finished_job_ttl: see FinishedJobExpiry (0 = finished jobs' keys stay).
  ServerContext(boost::asio::io_context& io, std::chrono::milliseconds finished_job_ttl)
      : finished_jobs(io, table, finished_job_ttl), bad_input_log(io) {
    if (finished_job_ttl.count() > 0) {
      table.on_write = [this](const std::string& key) { finished_jobs.on_write(key); };
    }
  }
  ServerContext(const ServerContext&) = delete;  // the table's hook points here
  ServerContext& operator=(const ServerContext&) = delete;

  KeyTable table;
  FinishedJobExpiry finished_jobs;  // expires finished jobs' keys
  wire::Limits limits;
  std::string token;              // empty = no authentication
  size_t max_pending_output = 0;  // bytes of unsent replies before pausing
  // A session must finish its handshake (authenticate with a token; send
  // one whole request without) within this. 0 = no deadline. (The server
  // sets the token or the no-token deadline here.)
  std::chrono::milliseconds handshake_timeout{0};
  // Without a token, a session past its handshake deadline is closed only
  // while more than this many sessions are open (3/4 of the connection
  // limit); below, its deadline starts again. torch 1.13's client opens a
  // second connection (for watch_key) that never speaks, and spins a core
  // for the rest of its life once that connection is closed: a silent
  // connection must cost its client nothing until the server needs room.
  size_t silent_close_above = 0;
  // A session that sends nothing for this long, with no WAIT parked, is
  // closed. 0 = never.
  std::chrono::milliseconds idle_timeout{0};
  size_t max_waits_per_session = 1024;
  size_t num_sessions = 0;
  std::unordered_set<class StoreSession*> sessions;  // open ones
  // Lines that clients' bad input causes go through this.
  LogLimiter bad_input_log;
  // Where a session reads what its small first buffer could not hold: one
  // per server, as the server's sessions all run on its one thread; sized on
  // first use (kReadBufferSize), so a server nobody floods costs nothing.
  // (A thread_local buffer would be 64 KiB of TLS that every thread of the
  // process, server or not, zeroes and keeps.)
  std::vector<char> read_buffer;
  static constexpr size_t kReadBufferSize = 64 * 1024;
};

class StoreSession : public std::enable_shared_from_this<StoreSession> {
 public:
  StoreSession(boost::asio::ip::tcp::socket socket, ServerContext& ctx);
  ~StoreSession();
  StoreSession(const StoreSession&) = delete;  // owns a socket
  StoreSession& operator=(const StoreSession&) = delete;

  // Starts reading and the handshake deadline. The session keeps itself
  // alive through its handlers.
  void start();

  // Closes the socket and cancels parked waits. Idempotent.
  void close();

  bool closed() const { return closed_; }

 private:
  using Clock = std::chrono::steady_clock;

  void do_read();
  void on_read(const boost::system::error_code& ec, size_t n);
  // Parses and handles requests from `in_` until they run out or the
  // unsent replies exceed the bound.
  void process();
  // Before authentication only VALIDATE and AUTHENTICATE pass; false (and
  // the session closed) for anything else.
  bool admit_unauthenticated(uint8_t type);
  void handle(wire::Request& req);
  void handle_get(const wire::Request& req);
  void handle_multi_get(const wire::Request& req);
  void handle_add(const wire::Request& req);
  void handle_wait(wire::Request& req);
  void handle_queue_pop(const wire::Request& req);
  void handle_delete_prefix(const wire::Request& req);
  void on_wait_ready(KeyWaiter* waiter);
  void cancel_waits();
  void flush();
  void on_written(const boost::system::error_code& ec);
  // True while unsent replies exceed the bound: no parsing, no reading.
  bool output_full() const;
  bool must_authenticate() const { return !ctx_.token.empty() && !authenticated_; }
  void on_handshake_done();
  void arm_timer(Clock::time_point deadline);
  void on_timer();
  void fail(const std::string& why);

  boost::asio::ip::tcp::socket socket_;
  ServerContext& ctx_;
  std::string peer_;  // "10.0.0.3:51234", for log lines
  boost::asio::steady_timer timer_;  // handshake, then idle deadline

  wire::Dialect dialect_ = wire::Dialect::kUnknown;
  bool authenticated_ = false;
  bool handshake_done_ = false;  // authenticated, or a first request handled
  bool closed_ = false;
  bool reading_ = false;         // a read is armed
  bool write_in_flight_ = false;
  bool close_after_flush_ = false;  // authentication was denied
  Clock::time_point started_;
  Clock::time_point last_activity_;  // last bytes received or wait answered

  std::array<char, 256> first_;  // what each read receives first
  std::string in_;       // bytes received and not yet parsed
  size_t in_needed_ = 0; // parse again only once in_ has this many bytes
  wire::ParseCursor cursor_;  // where an incomplete list request stopped
  std::string out_;      // replies not yet handed to the socket
  std::string writing_;  // the buffer of the write in flight
  wire::Request req_;    // reused across requests

  // Parked WAITs, in no particular order (their replies are all the same).
  std::vector<std::shared_ptr<KeyWaiter>> waits_;
};

}  // namespace ccrun::store
