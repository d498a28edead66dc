// TcpStore: the blocking client of a TCP store (see include/ccrun/tcp_store.h).
// Plain POSIX sockets: one connection, requests in order, each read bounded
// by a deadline through poll().
#include "ccrun/endpoint.h"
#include "ccrun/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "ccrun/error.h"
#include "store_util.h"
#include "wire_protocol.h"

namespace ccrun::store {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using Protocol = TcpStoreOptions::Protocol;

// A reply did not come before its deadline.
struct DeadlineExceeded {};

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return left.count() > INT32_MAX ? INT32_MAX : static_cast<int>(left.count());
}

// How long a timed-out WAIT's CANCEL_WAIT may take to be answered before
// the connection is dropped instead (a reconnect is cheap; a silent peer
// must not stretch a wait far past its timeout).
constexpr milliseconds kCancelGrace{1000};

// Bytes that read as text (an HTTP status line, a banner), not as the
// little-endian integers a store replies with.
bool looks_like_text(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = p[i];
    if (!((c >= 0x20 && c <= 0x7e) || c == '\r' || c == '\n' || c == '\t')) return false;
  }
  return n > 0;
}

}  // namespace

// One TCP connection to the store. Throws ConnectionError when it breaks.
class TcpStore::Connection {
 public:
  Connection(const TcpStoreOptions& opts, std::string endpoint)
      : opts_(opts), endpoint_(std::move(endpoint)) {
    connect();
    handshake();
  }
  ~Connection() { ::close(fd_); }

  void send(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          wait_for(POLLOUT, Clock::now() + opts_.timeout);
          continue;
        }
        lost(std::strerror(errno));
      }
      done += static_cast<size_t>(n);
    }
  }

  // Reads exactly n bytes before `deadline` (throws DeadlineExceeded).
  void recv(void* out, size_t n, Clock::time_point deadline) {
    auto* p = static_cast<char*>(out);
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::recv(fd_, p + done, n - done, 0);
      if (r > 0) {
        done += static_cast<size_t>(r);
        continue;
      }
      if (r == 0) lost(closed_why());
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) lost(std::strerror(errno));
      wait_for(POLLIN, deadline);
    }
  }

  template <typename T>
  T recv_value(Clock::time_point deadline) {
    T v{};
    recv(&v, sizeof v, deadline);
    if (!replied_) check_first_reply(&v, sizeof v);
    return v;
  }

  std::string recv_bytes(Clock::time_point deadline) {
    uint64_t len = recv_value<uint64_t>(deadline);
    if (len > kMaxReplyBytes) {
      lost("reply of " + std::to_string(len) + " bytes is over the limit of " +
           std::to_string(kMaxReplyBytes));
    }
    std::string s(len, '\0');
    recv(s.data(), len, deadline);
    return s;
  }

  std::string local_address() const {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
    char buf[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
    } else if (ss.ss_family == AF_INET6) {
      auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
      if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
        inet_ntop(AF_INET, &a6->sin6_addr.s6_addr[12], buf, sizeof buf);
      } else {
        inet_ntop(AF_INET6, &a6->sin6_addr, buf, sizeof buf);
      }
    }
    return buf;
  }

  // Whether the peer has answered on this connection yet.
  bool replied() const { return replied_; }

  // Why the peer closed: a store started with --token-file closes a
  // connection that sends a request unauthenticated, before any reply.
  std::string closed_why() const {
    std::string why = "the store closed the connection";
    if (replied_ || !opts_.token.empty()) return why;
    return why + " before its first reply; if it was started with --token-file (it wants a "
                 "token), set CCRUN_STORE_TOKEN_FILE to that file";
  }

  [[noreturn]] void lost(const std::string& why) {
    throw ConnectionError("store " + endpoint_ + ": connection lost: " + why);
  }

  // The first reply on a connection tells whether the peer speaks the
  // protocol at all: every one-byte reply is 0 or 1, and no length, count
  // or counter a store sends has 8 bytes that all read as text, while an
  // HTTP server's "HTTP/1.1 ..." does (as a length: 2319686071854584916).
  void check_first_reply(const void* first, size_t n) {
    replied_ = true;
    auto* p = static_cast<const unsigned char*>(first);
    if ((n == 1 && p[0] > 1) || (n > 1 && looks_like_text(p, n))) not_a_store(p, n);
  }

  [[noreturn]] void not_a_store(const unsigned char* first, size_t n) {
    std::string seen(reinterpret_cast<const char*>(first), n);
    // Show the peer's first line, if more of it is there already.
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      char more[120];
      ssize_t r = ::recv(fd_, more, sizeof more, MSG_DONTWAIT);
      if (r > 0) seen.append(more, static_cast<size_t>(r));
    }
    std::string text, hex;
    for (char c : seen) {
      if (c == '\r' || c == '\n') break;
      text += (c >= 0x20 && c <= 0x7e) ? c : '.';
    }
    char byte[4];
    for (size_t i = 0; i < n; ++i) {
      std::snprintf(byte, sizeof byte, i ? " %02x" : "%02x", first[i]);
      hex += byte;
    }
    throw NotAStoreError("store " + endpoint_ + ": the peer does not speak the TCPStore "
                         "protocol: its first reply begins \"" + text + "\" (" + hex +
                         "); this is not a ccrun or torch store. Check the address and "
                         "port (--rdzv-endpoint, --master-addr/--master-port)");
  }

 private:
  static constexpr uint64_t kMaxReplyBytes = 1ull << 40;

  void wait_for(short events, Clock::time_point deadline) {
    for (;;) {
      int r = poll_interruptible(fd_, events, remaining_ms(deadline));
      if (r > 0) {
        if (r & (POLLERR | POLLNVAL)) lost("socket error");
        return;  // readable, writable or hung up: the read/write tells which
      }
      if (r == 0) throw DeadlineExceeded{};
    }
  }

  // poll() on `fd` (none when -1) and on the interrupt: the revents of fd,
  // 0 on timeout; throws InterruptedError when the interrupt fired.
  int poll_interruptible(int fd, short events, int timeout_ms) {
    pollfd p[2] = {{fd, events, 0}, {-1, POLLIN, 0}};
    if (opts_.interrupt) p[1].fd = opts_.interrupt->fd();
    for (;;) {
      int r = ::poll(p, 2, timeout_ms);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) lost(std::strerror(errno));
      if (p[1].revents & POLLIN) {
        throw InterruptedError("store " + endpoint_ + ": call interrupted (stopping)");
      }
      return r == 0 ? 0 : (p[0].revents ? p[0].revents : 0);
    }
  }

  // Connects, retrying with exponential backoff until connect_timeout.
  void connect() {
    auto deadline = Clock::now() + opts_.connect_timeout;
    milliseconds backoff{10};
    std::string last_error;
    std::mt19937 jitter(std::random_device{}());
    for (;;) {
      if (try_connect(deadline, last_error)) return;
      if (Clock::now() >= deadline) break;
      // Backoff between attempts (with jitter so that many agents started
      // together do not retry in lockstep).
      auto pause = std::min(backoff, milliseconds(remaining_ms(deadline)));
      poll_interruptible(-1, 0, int((pause / 2 + milliseconds(jitter() % (pause.count() / 2 + 1))).count()));
      backoff = std::min(backoff * 2, milliseconds(1000));
    }
    throw ConnectionError("store " + endpoint_ + ": " + last_error + " after " +
                          format_duration(opts_.connect_timeout) +
                          " of retries; is ccrun-rendezvous (or the agent hosting "
                          "the store) running there, and is the port open?");
  }

  // True when the socket's two ends are the same address and port: with no
  // server listening on a port of the ephemeral range of this host, the
  // kernel may pick that very port as the connection's own and join it to
  // itself (TCP's simultaneous open). Such a client would read its own
  // requests back as answers; it is refused as no server is.
  static bool connected_to_itself(int fd) {
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof local, peer_len = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
      return false;
    }
    return local_len == peer_len && std::memcmp(&local, &peer, local_len) == 0;
  }

  bool try_connect(Clock::time_point deadline, std::string& error) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    std::string port = std::to_string(opts_.port);
    int rc = getaddrinfo(opts_.host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0) {
      error = "cannot resolve host \"" + opts_.host + "\" (" + gai_strerror(rc) + ")";
      return false;
    }
    bool ok = false;
    for (addrinfo* ai = res; ai && !ok; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        ai->ai_protocol);
      if (fd < 0) {
        error = std::strerror(errno);
        continue;
      }
      int r = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
      if (r != 0 && errno == EINPROGRESS) {
        int step = std::min(remaining_ms(deadline), 5000);
        try {
          r = poll_interruptible(fd, POLLOUT, std::max(step, 1)) != 0 ? 0 : -1;
        } catch (...) {
          ::close(fd);
          freeaddrinfo(res);
          throw;
        }
        if (r == 0) {
          int err = 0;
          socklen_t len = sizeof err;
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0) {
            errno = err;
            r = -1;
          }
        } else {
          errno = ETIMEDOUT;
        }
      }
      if (r == 0 && connected_to_itself(fd)) {
        errno = ECONNREFUSED;
        r = -1;
      }
      if (r == 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fd_ = fd;
        ok = true;
      } else {
        error = std::strerror(errno);
        for (auto& c : error) c = static_cast<char>(std::tolower(c));
        ::close(fd);
      }
    }
    freeaddrinfo(res);
    return ok;
  }

  void handshake() {
    if (opts_.protocol == Protocol::kTorch113) {
      if (!opts_.token.empty()) {
        throw AuthError("store " + endpoint_ +
                        ": a token needs the torch 2.x dialect; torch 1.13 "
                        "stores have no authentication");
      }
      return;
    }
    std::string req;
    wire::append_u8(req, uint8_t(wire::Query::kValidate));
    wire::append_u32(req, wire::kValidationMagic);
    if (!opts_.token.empty()) {
      wire::append_u8(req, uint8_t(wire::Query::kAuthenticate));
      wire::append_bytes(req, opts_.token);
    }
    send(req);
    if (opts_.token.empty()) return;
    uint8_t answer = 1;
    // Part of connecting: bounded by connect_timeout as well.
    auto limit = std::min(opts_.timeout, std::max(opts_.connect_timeout, milliseconds(1)));
    try {
      answer = recv_value<uint8_t>(Clock::now() + limit);
    } catch (const ConnectionError&) {
      throw AuthError("store " + endpoint_ +
                      ": the store closed the connection during "
                      "authentication; is it a ccrun store?");
    } catch (const DeadlineExceeded&) {
      throw AuthError("store " + endpoint_ + ": no answer to authentication within " +
                      format_duration(limit) +
                      "; is it a ccrun store (started with --token-file)?");
    }
    if (answer != uint8_t(wire::AuthResponse::kAccepted)) {
      throw AuthError("store " + endpoint_ +
                      ": the store refused the token; check --token-file / "
                      "CCRUN_STORE_TOKEN_FILE on both sides");
    }
  }

  const TcpStoreOptions& opts_;
  std::string endpoint_;
  int fd_ = -1;
  bool replied_ = false;  // the first reply was read (and looked like one)
};

namespace {

uint8_t type_byte(Protocol p, wire::Query q) {
  if (p == Protocol::kTorch2) return static_cast<uint8_t>(q);
  using L = wire::LegacyQuery;
  switch (q) {
    case wire::Query::kSet: return uint8_t(L::kSet);
    case wire::Query::kCompareSet: return uint8_t(L::kCompareSet);
    case wire::Query::kGet: return uint8_t(L::kGet);
    case wire::Query::kAdd: return uint8_t(L::kAdd);
    case wire::Query::kCheck: return uint8_t(L::kCheck);
    case wire::Query::kWait: return uint8_t(L::kWait);
    case wire::Query::kGetNumKeys: return uint8_t(L::kGetNumKeys);
    case wire::Query::kDeleteKey: return uint8_t(L::kDeleteKey);
    default:
      throw NotSupportedError(wire::query_name(q) +
                              " is not supported by torch 1.13 stores");
  }
}

void append_keys(std::string& req, const std::vector<std::string>& keys) {
  wire::append_u64(req, keys.size());
  for (const auto& k : keys) wire::append_bytes(req, k);
}

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options)
    : Store(options.timeout), options_(std::move(options)) {
  conn_ = std::make_unique<Connection>(options_, endpoint());
}

TcpStore::~TcpStore() = default;

milliseconds TcpStore::reply_timeout() const {
  auto t = timeout();
  return t.count() > 0 ? std::min(options_.timeout, t) : options_.timeout;
}

Clock::time_point TcpStore::reply_deadline(const Connection& c) const {
  auto t = reply_timeout();
  // Until the peer has answered once, the connection is still being made:
  // connect_timeout bounds that too (a peer that accepts and never answers
  // is no more reachable than one that refuses).
  if (!c.replied()) t = std::min(t, std::max(options_.connect_timeout, milliseconds(1)));
  return Clock::now() + t;
}

std::string TcpStore::endpoint() const { return format_host_port(options_.host, options_.port); }

// Runs f(connection) under the lock, reconnecting a broken connection
// first; an idempotent call that loses the connection is retried once.
template <typename F>
auto TcpStore::call(bool idempotent, F&& f) {
  std::lock_guard lock(mu_);
  for (int attempt = 0;; ++attempt) {
    if (options_.interrupt && options_.interrupt->triggered()) {
      throw InterruptedError("store " + endpoint() + ": call interrupted (stopping)");
    }
    if (!conn_) conn_ = std::make_unique<Connection>(options_, endpoint());
    try {
      return f(*conn_);
    } catch (const ConnectionError&) {
      conn_.reset();
      if (!idempotent || attempt > 0) throw;
    } catch (const InterruptedError&) {
      conn_.reset();  // a request may be half sent or its reply unread
      throw;
    } catch (const ProtocolError&) {
      conn_.reset();  // out of step, or not a store at all: never reused
      throw;
    } catch (const DeadlineExceeded&) {
      // A reply is late: the connection is out of step with its requests.
      bool never_answered = !conn_->replied();
      conn_.reset();
      if (never_answered) {
        auto t = std::min(reply_timeout(), std::max(options_.connect_timeout, milliseconds(1)));
        throw TimeoutError("store " + endpoint() + ": the peer accepted the connection but "
                           "sent no reply within " + format_duration(t) +
                           "; is it a ccrun or torch store, and is it running normally?");
      }
      throw TimeoutError("store " + endpoint() + ": no reply within " +
                         format_duration(reply_timeout()) + "; is the store overloaded?");
    }
  }
}

void TcpStore::set(const std::string& key, const std::string& value) {
  std::string req;
  wire::append_u8(req, type_byte(options_.protocol, wire::Query::kSet));
  wire::append_bytes(req, key);
  wire::append_bytes(req, value);
  call(true, [&](Connection& c) { c.send(req); });
}

std::string TcpStore::get(const std::string& key) {
  auto t = timeout();
  return call(true, [&](Connection& c) {
    wait_locked(c, {key}, t);
    std::string req;
    wire::append_u8(req, type_byte(options_.protocol, wire::Query::kGet));
    wire::append_bytes(req, key);
    c.send(req);
    return c.recv_bytes(reply_deadline(c));
  });
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::string req;
  wire::append_u8(req, type_byte(options_.protocol, wire::Query::kAdd));
  wire::append_bytes(req, key);
  wire::append_i64(req, delta);
  return call(delta == 0, [&](Connection& c) {  // add(k, 0) only reads
    c.send(req);
    return c.recv_value<int64_t>(reply_deadline(c));
  });
}

std::string TcpStore::compare_set(const std::string& key,
                                  const std::string& expected,
                                  const std::string& desired) {
  std::string req;
  wire::append_u8(req, type_byte(options_.protocol, wire::Query::kCompareSet));
  wire::append_bytes(req, key);
  wire::append_bytes(req, expected);
  wire::append_bytes(req, desired);
  return call(false, [&](Connection& c) {
    c.send(req);
    return c.recv_bytes(reply_deadline(c));
  });
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::string req;
  wire::append_u8(req, type_byte(options_.protocol, wire::Query::kCheck));
  append_keys(req, keys);
  return call(true, [&](Connection& c) {
    c.send(req);
    return c.recv_value<uint8_t>(reply_deadline(c)) ==
           uint8_t(wire::CheckResponse::kReady);
  });
}

void TcpStore::wait_locked(Connection& c, const std::vector<std::string>& keys,
                           milliseconds timeout) {
  const TcpStoreOptions& opts = options_;
  std::string req;
  wire::append_u8(req, type_byte(opts.protocol, wire::Query::kWait));
  append_keys(req, keys);
  c.send(req);
  auto deadline = Clock::now() + timeout;
  try {
    c.recv_value<uint8_t>(deadline);  // STOP_WAITING
    return;
  } catch (const DeadlineExceeded&) {
  }
  std::string why = "store " + endpoint() + ": timed out after " +
                    format_duration(timeout) + " waiting for key" +
                    (keys.size() == 1 ? " " : "s ") + quote_keys(keys);
  if (opts.protocol == Protocol::kTorch113) {
    conn_.reset();  // no way to cancel: the connection is out of step
    throw TimeoutError(why);
  }
  std::string cancel;
  wire::append_u8(cancel, uint8_t(wire::Query::kCancelWait));
  c.send(cancel);
  try {
    auto grace = Clock::now() + std::min(reply_timeout(), kCancelGrace);
    // A STOP_WAITING may cross our CANCEL_WAIT; WAIT_CANCELED ends it.
    while (c.recv_value<uint8_t>(grace) != uint8_t(wire::WaitResponse::kWaitCanceled)) {
    }
  } catch (const DeadlineExceeded&) {
    conn_.reset();
  }
  throw TimeoutError(why);
}

void TcpStore::wait(const std::vector<std::string>& keys,
                    milliseconds timeout) {
  call(true, [&](Connection& c) {
    wait_locked(c, keys, timeout);
  });
}

bool TcpStore::delete_key(const std::string& key) {
  std::string req;
  wire::append_u8(req, type_byte(options_.protocol, wire::Query::kDeleteKey));
  wire::append_bytes(req, key);
  return call(false, [&](Connection& c) {
    c.send(req);
    return c.recv_value<int64_t>(reply_deadline(c)) > 0;
  });
}

int64_t TcpStore::num_keys() {
  std::string req;
  wire::append_u8(req, type_byte(options_.protocol, wire::Query::kGetNumKeys));
  return call(true, [&](Connection& c) {
    c.send(req);
    return c.recv_value<int64_t>(reply_deadline(c));
  });
}

void TcpStore::append(const std::string& key, const std::string& value) {
  std::string req;
  wire::append_u8(req, type_byte(options_.protocol, wire::Query::kAppend));
  wire::append_bytes(req, key);
  wire::append_bytes(req, value);
  call(false, [&](Connection& c) { c.send(req); });
}

std::vector<std::string> TcpStore::multi_get(
    const std::vector<std::string>& keys) {
  auto t = timeout();
  return call(true, [&](Connection& c) {
    wait_locked(c, keys, t);
    std::string req;
    if (options_.protocol == Protocol::kTorch2) {
      wire::append_u8(req, uint8_t(wire::Query::kMultiGet));
      append_keys(req, keys);
    } else {
      for (const auto& k : keys) {  // pipelined GETs, answered in order
        wire::append_u8(req, type_byte(options_.protocol, wire::Query::kGet));
        wire::append_bytes(req, k);
      }
    }
    c.send(req);
    std::vector<std::string> values;
    values.reserve(keys.size());
    auto deadline = reply_deadline(c);
    for (size_t i = 0; i < keys.size(); ++i) values.push_back(c.recv_bytes(deadline));
    return values;
  });
}

void TcpStore::multi_set(const std::vector<std::string>& keys,
                         const std::vector<std::string>& values) {
  if (keys.size() != values.size()) {
    throw Error("store " + endpoint() + ": multi_set got " +
                std::to_string(keys.size()) + " keys and " +
                std::to_string(values.size()) + " values; pass one value per key");
  }
  std::string req;
  if (options_.protocol == Protocol::kTorch2) {
    wire::append_u8(req, uint8_t(wire::Query::kMultiSet));
    wire::append_i64(req, static_cast<int64_t>(keys.size()));
    for (size_t i = 0; i < keys.size(); ++i) {
      wire::append_bytes(req, keys[i]);
      wire::append_bytes(req, values[i]);
    }
  } else {
    for (size_t i = 0; i < keys.size(); ++i) {
      wire::append_u8(req, type_byte(options_.protocol, wire::Query::kSet));
      wire::append_bytes(req, keys[i]);
      wire::append_bytes(req, values[i]);
    }
  }
  call(true, [&](Connection& c) { c.send(req); });
}

void TcpStore::queue_push(const std::string& key, const std::string& value) {
  std::string req;
  wire::append_u8(req, type_byte(options_.protocol, wire::Query::kQueuePush));
  wire::append_bytes(req, key);
  wire::append_bytes(req, value);
  call(false, [&](Connection& c) { c.send(req); });
}

std::optional<std::string> TcpStore::queue_pop(const std::string& key, bool block) {
  std::string req;
  wire::append_u8(req, type_byte(options_.protocol, wire::Query::kQueuePop));
  wire::append_bytes(req, key);
  auto t = timeout();
  auto deadline = Clock::now() + t;
  return call(false, [&](Connection& c) -> std::optional<std::string> {
    for (;;) {
      if (block) {
        auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
        wait_locked(c, {key}, std::max(left, milliseconds(0)));
      }
      c.send(req);
      auto length = c.recv_value<int64_t>(reply_deadline(c));
      if (length > 0) return c.recv_bytes(reply_deadline(c));
      if (!block) return std::nullopt;
      // Another client popped the item we were woken for: wait again.
    }
  });
}

int64_t TcpStore::queue_len(const std::string& key) {
  std::string req;
  wire::append_u8(req, type_byte(options_.protocol, wire::Query::kQueueLen));
  wire::append_bytes(req, key);
  return call(true, [&](Connection& c) {
    c.send(req);
    return c.recv_value<int64_t>(reply_deadline(c));
  });
}

std::optional<size_t> TcpStore::delete_prefix(const std::string& prefix,
                                               const std::string& guard_key) {
  if (prefix.empty() || guard_key.rfind(prefix, 0) != 0) {
    throw Error("store " + endpoint() + ": delete_prefix(\"" + prefix + "\", \"" + guard_key +
                "\"): the prefix must not be empty and the guard key must begin with it");
  }
  std::string req;
  wire::append_u8(req, type_byte(options_.protocol, wire::Query::kDeletePrefix));
  wire::append_bytes(req, prefix);
  wire::append_bytes(req, guard_key);
  int64_t n = call(false, [&](Connection& c) {
    c.send(req);
    return c.recv_value<int64_t>(reply_deadline(c));
  });
  if (n < 0) return std::nullopt;
  return static_cast<size_t>(n);
}

std::chrono::microseconds TcpStore::ping() {
  auto start = Clock::now();
  if (options_.protocol == Protocol::kTorch113) {
    num_keys();
  } else {
    // Its low byte 0: an echo never reads as text (see check_first_reply).
    uint32_t nonce = static_cast<uint32_t>(start.time_since_epoch().count()) & 0xFFFFFF00u;
    std::string req;
    wire::append_u8(req, uint8_t(wire::Query::kPing));
    wire::append_u32(req, nonce);
    uint32_t echoed = call(true, [&](Connection& c) {
      c.send(req);
      return c.recv_value<uint32_t>(reply_deadline(c));
    });
    if (echoed != nonce) {
      std::lock_guard lock(mu_);
      conn_.reset();
      throw ProtocolError("store " + endpoint() + ": PING answered with a wrong nonce");
    }
  }
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
}

std::optional<ClockReading> TcpStore::read_clock() {
  if (options_.protocol == Protocol::kTorch113) return std::nullopt;
  using std::chrono::microseconds;
  auto now_us = [] {
    return std::chrono::duration_cast<microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  std::string req;
  wire::append_u8(req, uint8_t(wire::Query::kTime));
  int64_t sent = 0, received = 0;
  int64_t server = call(true, [&](Connection& c) {
    sent = now_us();
    c.send(req);
    int64_t t = c.recv_value<int64_t>(reply_deadline(c));
    received = now_us();
    return t;
  });
  return ClockReading{microseconds(server - (sent + received) / 2), microseconds(received - sent)};
}

std::string TcpStore::local_address() {
  return call(true, [&](Connection& c) { return c.local_address(); });
}

}  // namespace ccrun::store
