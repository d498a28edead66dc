//===- ccrun/store_server.h - The TCP key-value store server ----*- C++ -*-===//
//
// `StoreServer` serves the Store semantics over PyTorch's TCPStore wire
// protocol, so torch's own clients (1.13 and 2.x) and ccrun's TcpStore can
// share it. One thread runs every connection (Boost.Asio); a client waiting
// for keys is parked on them and woken when they are set, never polled.
//
//   StoreServerOptions opts;
//   opts.host = "0.0.0.0";
//   opts.port = 29400;                  // 0 = any free port
//   StoreServer server(opts);
//   server.start();                     // binds; serves on its own thread
//   std::cout << server.port();
//   ...
//   server.stop();                      // closes every connection, joins
//
// Bad input (an oversized length, an unknown query type, a half frame, a
// client that never reads or never authenticates) costs that one
// connection, never the server; the log lines it causes are rate-limited.
// The data lives in memory only: a restarted server starts empty.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace ccrun::store {

struct StoreServerOptions {
  // Address to bind: "127.0.0.1", "0.0.0.0", "::", or a host's address.
  std::string host = "127.0.0.1";
  // Port to bind; 0 picks a free one (read it back with port()).
  uint16_t port = 0;
  // What to do when another process holds `port`, said in start()'s error;
  // the default suits an agent's store (its port is the job's).
  std::string port_in_use_fix =
      "pick another port (or 0 for a free one, single-node jobs only)";
  // Shared secret clients must present (2.x dialect, ccrun's AUTHENTICATE)
  // before any other request. Empty = no authentication; torch clients can
  // only use a store without a token.
  std::string token;
  // Connections beyond this are closed as soon as they are accepted. 0 (the
  // default) = what the open-file limit allows less a margin of 64 for the
  // server's own files (RLIMIT_NOFILE is raised to its hard limit first), at
  // most 65536. An explicit value over that is kept, with a warning.
  size_t max_connections = 0;
  // With a token: a connection must authenticate within this, or is
  // closed. 0 = no deadline.
  std::chrono::milliseconds handshake_timeout{10'000};
  // Without a token: a connection that has not sent one whole request
  // within this is closed when more than 3/4 of max_connections are open
  // (a load generator may open thousands before it speaks); below that it
  // stays, its deadline started again: torch 1.13's watch_key connection
  // never speaks, and its client spins a core once it is closed. 0 = no
  // deadline.
  std::chrono::milliseconds first_request_timeout{60'000};
  // A connection that sends nothing for this long, with no WAIT parked, is
  // closed. 0 (the default) = never: torch's clients keep their connection
  // open and silent for the whole job.
  std::chrono::milliseconds idle_timeout{0};
  // Once a job's done marker exists (ccrun/<run_id>/closed, or
  // ccrun/<run_id>/round/<R>/all_exited) and nothing has been written under
  // ccrun/<run_id>/ for this long, the job's keys are deleted. 0 (the
  // default here; ccrun-rendezvous uses 10 min) = they stay.
  std::chrono::milliseconds finished_job_ttl{0};
  // WAITs one connection may have parked at once (a client whose waits time
  // out without CANCEL_WAIT, as torch 1.13's, leaves them parked); one more
  // closes the connection.
  size_t max_waits_per_connection = 1024;
  // Bounds on one request (a request over one ends its connection). A
  // parked WAIT costs about 200 bytes of memory per missing key, so the key
  // count is capped as torch's libuv server caps it (128 Ki).
  uint64_t max_key_bytes = 64 * 1024;
  uint64_t max_value_bytes = 256ull * 1024 * 1024;
  uint64_t max_keys_per_request = 128 * 1024;  // torch 2.x's own limit
  // A connection whose unsent replies exceed this is neither parsed nor
  // read from until its client catches up (bounds the memory a client that
  // does not read costs: this plus one reply).
  size_t max_pending_output_bytes = 4 * 1024 * 1024;
};

class StoreServer {
 public:
  explicit StoreServer(StoreServerOptions options);
  ~StoreServer();  // stop()s
  StoreServer(const StoreServer&) = delete;  // owns a socket and a thread
  StoreServer& operator=(const StoreServer&) = delete;

  // Binds and listens. Throws ccrun::Error naming the address when the port
  // is taken or the address is not this host's.
  void bind();

  // bind()s if needed, then serves on an internal thread.
  void start();

  // bind()s if needed, then serves on the calling thread until stop() (from
  // another thread or a handler).
  void run();

  // Closes the listener and every connection; joins the internal thread.
  // Safe to call twice and from any thread but the serving one.
  void stop();

  // The bound port (after bind()).
  [[nodiscard]] uint16_t port() const;

  // Connections open now.
  [[nodiscard]] size_t num_connections() const;

  // The connection limit in force (after bind(); see max_connections).
  [[nodiscard]] size_t max_connections() const;

  // Keys stored now.
  [[nodiscard]] size_t num_keys() const;
  // Removes every key, value and queue, that does not begin with `keep`;
  // returns how many values it removed. An agent clears the workers' keys of
  // an attempt this way, keeping its own (ccrun/...). Waiters stay parked.
  size_t erase_keys_outside(std::string_view keep);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Raises this process's RLIMIT_NOFILE soft limit to its hard limit; returns
// the new soft limit. Servers and load generators call it before accepting
// thousands of connections.
uint64_t raise_open_file_limit();

}  // namespace ccrun::store
