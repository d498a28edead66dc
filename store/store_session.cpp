// One client connection of the store server (see store_session.h).
#include "store_session.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>

#include "store_util.h"
#include "ccrun/endpoint.h"

namespace ccrun::store {
namespace asio = boost::asio;
using wire::Query;

namespace {

// Reads per readiness event before yielding to other sessions.
constexpr int kReadsPerEvent = 16;

std::string describe(const asio::ip::tcp::socket& socket) {
  boost::system::error_code ec;
  auto ep = socket.remote_endpoint(ec);
  if (ec) return "an unknown peer";
  return format_host_port(ep.address().to_string(), ep.port());
}

// Compares without an early exit, so timing does not leak the token's
// bytes (its length is not worth hiding).
bool constant_time_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

std::string secs(std::chrono::milliseconds d) { return format_duration(d); }

}  // namespace

StoreSession::StoreSession(asio::ip::tcp::socket socket, ServerContext& ctx)
    : socket_(std::move(socket)),
      ctx_(ctx),
      peer_(describe(socket_)),
      timer_(socket_.get_executor()) {
  ++ctx_.num_sessions;
  ctx_.sessions.insert(this);
}

StoreSession::~StoreSession() { close(); }

void StoreSession::start() {
  boost::system::error_code ec;
  socket_.non_blocking(true, ec);
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  spdlog::debug("store: connection from {}", peer_);
  started_ = last_activity_ = Clock::now();
  if (ctx_.handshake_timeout.count() > 0) {
    arm_timer(started_ + ctx_.handshake_timeout);
  } else if (ctx_.idle_timeout.count() > 0) {
    arm_timer(started_ + ctx_.idle_timeout);
  }
  do_read();
}

void StoreSession::close() {
  if (closed_) return;
  closed_ = true;
  cancel_waits();
  boost::system::error_code ec;
  timer_.cancel();
  socket_.close(ec);
  --ctx_.num_sessions;
  ctx_.sessions.erase(this);
}

bool StoreSession::output_full() const {
  return out_.size() + writing_.size() > ctx_.max_pending_output;
}

void StoreSession::do_read() {
  if (closed_ || reading_ || output_full()) return;
  reading_ = true;
  // A read, not a wait for readability: Asio re-arms epoll (epoll_ctl) for
  // every async_wait, while a read stays registered and costs at most one
  // speculative recv.
  socket_.async_read_some(asio::buffer(first_),
                          [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                            self->reading_ = false;
                            self->on_read(ec, n);
                          });
}

void StoreSession::on_read(const boost::system::error_code& ec, size_t n) {
  if (closed_) return;
  bool eof = false;
  if (ec == asio::error::eof) {
    eof = true;
  } else if (ec) {
    if (ec != asio::error::operation_aborted) close();
    return;
  }
  in_.append(first_.data(), n);
  if (n > 0) last_activity_ = Clock::now();
  if (must_authenticate()) {
    // Before authentication only the handshake's bytes: VALIDATE (5) and
    // AUTHENTICATE with the token (9 + its length). Nothing more is read
    // in one go than the small first buffer.
    size_t handshake = 5 + 9 + ctx_.token.size();
    if (in_.size() > handshake) {
      fail("sent " + std::to_string(in_.size()) +
           " bytes before authenticating, more than the handshake's " +
           std::to_string(handshake));
      return;
    }
  } else {
    // The small first buffer was filled: the rest waits in the socket.
    std::vector<char>& buffer = ctx_.read_buffer;
    if (buffer.empty()) buffer.resize(ServerContext::kReadBufferSize);
    for (int i = 0; !eof && n == first_.size() && i < kReadsPerEvent; ++i) {
      boost::system::error_code rec;
      n = socket_.read_some(asio::buffer(buffer), rec);
      if (rec == asio::error::would_block || rec == asio::error::try_again) break;
      if (rec) {
        eof = true;
        break;
      }
      in_.append(buffer.data(), n);
      if (n < buffer.size()) break;
    }
  }
  process();
  if (eof) {
    if (!closed_ && (in_needed_ > 0 || cursor_.in_list) && ctx_.bad_input_log.allow()) {
      spdlog::warn("store: connection from {} closed in the middle of a "
                   "request ({} bytes of it received)", peer_, in_.size());
    } else {
      spdlog::debug("store: connection from {} closed", peer_);
    }
    close();
    return;
  }
  do_read();
}

void StoreSession::process() {
  size_t pos = 0;
  bool full = false;  // stopped with requests left, for the replies' sake
  while (!closed_ && pos < in_.size()) {
    if (output_full()) {
      full = true;
      break;
    }
    std::string_view view(in_.data() + pos, in_.size() - pos);
    if (dialect_ == wire::Dialect::kUnknown) {
      dialect_ = wire::detect_dialect(view);
      if (dialect_ == wire::Dialect::kUnknown) break;
      if (dialect_ == wire::Dialect::kTorch113 && !ctx_.token.empty()) {
        fail("a torch 1.13 client cannot authenticate, and this store "
             "requires a token");
        return;
      }
    }
    if (view.size() < in_needed_) break;
    wire::Limits limits = ctx_.limits;
    if (must_authenticate()) {
      if (!admit_unauthenticated(uint8_t(view[0]))) return;
      limits.max_key_bytes = ctx_.token.size();  // the only string: the token
    }
    auto r = wire::parse_request(view, dialect_, limits, req_, &cursor_);
    if (r.status == wire::ParseStatus::kNeedMore) {
      in_needed_ = r.needed;
      break;
    }
    if (r.status == wire::ParseStatus::kError) {
      fail(must_authenticate() ? "before authenticating: " + r.error : r.error);
      return;
    }
    in_needed_ = 0;
    pos += r.consumed;
    handle(req_);
  }
  if (closed_) return;
  in_.erase(0, pos);
  flush();
  if (full && !write_in_flight_ && !output_full()) {
    // The socket took every reply at once, so no write completion will
    // resume us: go on with the rest, after the other sessions' turns.
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      if (self->closed_) return;
      self->process();
      self->do_read();
    });
  }
}

bool StoreSession::admit_unauthenticated(uint8_t type) {
  if (type == uint8_t(Query::kValidate) || type == uint8_t(Query::kAuthenticate)) {
    return true;
  }
  fail("sent " + wire::query_name(static_cast<Query>(type)) +
       " before authenticating; this store requires a token");
  return false;
}

void StoreSession::handle(wire::Request& req) {
  KeyTable& table = ctx_.table;
  if (ctx_.token.empty() && !handshake_done_) on_handshake_done();
  switch (req.type) {
    case Query::kValidate:
      if (req.u32 != wire::kValidationMagic) {
        fail("VALIDATE with a wrong magic number; not a TCPStore client?");
      }
      return;
    case Query::kAuthenticate:
      if (ctx_.token.empty() || constant_time_equal(req.keys[0], ctx_.token)) {
        authenticated_ = true;
        if (!handshake_done_) on_handshake_done();
        wire::append_u8(out_, uint8_t(wire::AuthResponse::kAccepted));
      } else {
        if (ctx_.bad_input_log.allow()) {
          spdlog::warn("store: connection from {} presented a wrong token; "
                       "closing it", peer_);
        }
        wire::append_u8(out_, uint8_t(wire::AuthResponse::kDenied));
        close_after_flush_ = true;
      }
      return;
    case Query::kSet:
      table.set(req.keys[0], std::move(req.values[0]));
      return;
    case Query::kCompareSet: {
      const std::string& key = req.keys[0];
      const std::string& expected = req.values[0];
      std::string& desired = req.values[1];
      const std::string* now = table.find(key);
      wire::append_bytes(out_, compare_set_reply(now, expected, desired));
      if (compare_set_writes(now, expected)) table.set(key, std::move(desired));
      return;
    }
    case Query::kGet:
      handle_get(req);
      return;
    case Query::kAdd:
      handle_add(req);
      return;
    case Query::kCheck: {
      bool ready = std::all_of(req.keys.begin(), req.keys.end(),
                               [&](const std::string& k) { return table.present(k); });
      wire::append_u8(out_, uint8_t(ready ? wire::CheckResponse::kReady
                                          : wire::CheckResponse::kNotReady));
      return;
    }
    case Query::kWait:
      handle_wait(req);
      return;
    case Query::kMultiGet:
      handle_multi_get(req);
      return;
    case Query::kGetNumKeys:
      wire::append_i64(out_, static_cast<int64_t>(table.size()));
      return;
    case Query::kList:
      wire::append_i64(out_, static_cast<int64_t>(table.size()));
      table.for_each_key([&](const std::string& key) { wire::append_bytes(out_, key); });
      return;
    case Query::kDeleteKey:
      wire::append_i64(out_, table.erase(req.keys[0]) ? 1 : 0);
      return;
    case Query::kAppend:
      table.append(req.keys[0], req.values[0]);
      return;
    case Query::kMultiSet:
      for (size_t i = 0; i < req.keys.size(); ++i) {
        table.set(req.keys[i], std::move(req.values[i]));
      }
      return;
    case Query::kCancelWait:
      cancel_waits();
      wire::append_u8(out_, uint8_t(wire::WaitResponse::kWaitCanceled));
      return;
    case Query::kPing:
      wire::append_u32(out_, req.u32);
      return;
    case Query::kQueuePush:
      table.queue_push(req.keys[0], std::move(req.values[0]));
      return;
    case Query::kQueuePop:
      handle_queue_pop(req);
      return;
    case Query::kQueueLen:
      wire::append_i64(out_, static_cast<int64_t>(table.queue_length(req.keys[0])));
      return;
    case Query::kDeletePrefix:
      handle_delete_prefix(req);
      return;
    case Query::kTime:
      wire::append_i64(out_, std::chrono::duration_cast<std::chrono::microseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count());
      return;
  }
}

void StoreSession::handle_delete_prefix(const wire::Request& req) {
  const std::string& prefix = req.keys[0];
  const std::string& guard = req.keys[1];
  if (prefix.empty() || !guard.starts_with(prefix)) {
    fail("DELETE_PREFIX of \"" + prefix + "\" guarded by \"" + guard +
         "\": the prefix must not be empty and the guard key must begin with it");
    return;
  }
  if (!ctx_.table.find(guard)) {
    wire::append_i64(out_, -1);  // the job is not done: nothing deleted
    return;
  }
  size_t n = ctx_.table.erase_prefix(prefix);
  spdlog::info("store: deleted {} key(s) under \"{}\" for {} (guard \"{}\")", n, prefix,
               peer_, guard);
  wire::append_i64(out_, static_cast<int64_t>(n));
}

void StoreSession::handle_get(const wire::Request& req) {
  if (req.legacy_watch) {
    fail("WATCH_KEY is not supported by ccrun's store");
    return;
  }
  const std::string* v = ctx_.table.find(req.keys[0]);
  if (v) {
    wire::append_bytes(out_, *v);
  } else if (dialect_ == wire::Dialect::kTorch2) {
    // torch 2.x's server answers an empty value (its clients WAIT first).
    wire::append_bytes(out_, {});
  } else {
    // torch 1.13's server closes the connection (its clients WAIT first).
    fail("GET of key \"" + req.keys[0] + "\", which does not exist (torch 1.13 "
         "dialect: a client must WAIT for a key before it GETs it)");
  }
}

void StoreSession::handle_multi_get(const wire::Request& req) {
  // One reply may carry at most as many value bytes as one SET may.
  uint64_t bytes = 0;
  for (const auto& k : req.keys) {
    const std::string* v = ctx_.table.find(k);
    bytes += v ? v->size() : 0;
  }
  if (bytes > ctx_.limits.max_value_bytes) {
    fail("MULTI_GET of " + std::to_string(req.keys.size()) + " keys asks for " +
         std::to_string(bytes) + " bytes of values, limit " +
         std::to_string(ctx_.limits.max_value_bytes) + " (--max-value-bytes)");
    return;
  }
  // As torch 2.x's server: a missing key reads as an empty value.
  for (const auto& k : req.keys) {
    const std::string* v = ctx_.table.find(k);
    wire::append_bytes(out_, v ? std::string_view(*v) : std::string_view());
  }
}

void StoreSession::handle_add(const wire::Request& req) {
  int64_t value = 0;
  switch (ctx_.table.add(req.keys[0], req.delta, value)) {
    case KeyTable::AddResult::kOk:
      wire::append_i64(out_, value);
      return;
    case KeyTable::AddResult::kNotCounter:
      fail("ADD on key \"" + req.keys[0] +
           "\", whose value is not an integer counter");
      return;
    case KeyTable::AddResult::kOverflow:
      fail("ADD of " + std::to_string(req.delta) + " to key \"" + req.keys[0] +
           "\" (now " + std::to_string(value) +
           ") would overflow int64; the value is left as it was");
      return;
  }
}

void StoreSession::handle_wait(wire::Request& req) {
  if (waits_.size() >= ctx_.max_waits_per_session) {
    fail("parked more than " + std::to_string(ctx_.max_waits_per_session) +
         " WAITs on one connection (a client whose waits keep timing out "
         "without CANCEL_WAIT?)");
    return;
  }
  auto waiter = std::make_shared<KeyWaiter>();
  if (ctx_.table.park(waiter, req.keys)) {
    wire::append_u8(out_, uint8_t(wire::WaitResponse::kStopWaiting));
    return;
  }
  // The waiter holds the session: a session with a parked WAIT may have no
  // read or write armed. close() cancels the waiter, which breaks the cycle.
  waiter->on_ready = [self = shared_from_this(), raw = waiter.get()] {
    self->on_wait_ready(raw);
  };
  waits_.push_back(std::move(waiter));
}

void StoreSession::handle_queue_pop(const wire::Request& req) {
  size_t length = 0;
  auto value = ctx_.table.queue_pop(req.keys[0], length);
  wire::append_i64(out_, static_cast<int64_t>(length));
  if (value) wire::append_bytes(out_, *value);
}

void StoreSession::on_wait_ready(KeyWaiter* waiter) {
  if (closed_) return;
  auto it = std::find_if(waits_.begin(), waits_.end(),
                         [&](const auto& w) { return w.get() == waiter; });
  if (it != waits_.end()) {
    std::swap(*it, waits_.back());
    waits_.pop_back();
  }
  last_activity_ = Clock::now();
  // Called from inside another request (a SET), maybe of this session.
  wire::append_u8(out_, uint8_t(wire::WaitResponse::kStopWaiting));
  flush();
}

void StoreSession::cancel_waits() {
  for (const auto& w : waits_) ctx_.table.cancel(w);
  waits_.clear();
}

void StoreSession::flush() {
  if (closed_ || write_in_flight_ || out_.empty()) return;
  boost::system::error_code ec;
  size_t n = socket_.write_some(asio::buffer(out_), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    n = 0;
  } else if (ec) {
    close();
    return;
  }
  if (n == out_.size()) {
    out_.clear();
    if (close_after_flush_) close();
    return;
  }
  out_.erase(0, n);
  std::swap(out_, writing_);
  write_in_flight_ = true;
  asio::async_write(socket_, asio::buffer(writing_),
                    [self = shared_from_this()](boost::system::error_code wec,
                                                size_t) {
                      self->on_written(wec);
                    });
}

void StoreSession::on_written(const boost::system::error_code& ec) {
  write_in_flight_ = false;
  writing_.clear();
  if (closed_) return;
  if (ec) {
    close();
    return;
  }
  if (out_.empty() && close_after_flush_) {
    close();
    return;
  }
  flush();
  if (output_full()) return;
  // The client caught up: go on with what it sent meanwhile.
  process();
  do_read();
}

void StoreSession::on_handshake_done() {
  handshake_done_ = true;
  if (ctx_.idle_timeout.count() > 0) {
    arm_timer(last_activity_ + ctx_.idle_timeout);  // replaces the handshake deadline
  } else {
    timer_.cancel();
  }
}

void StoreSession::arm_timer(Clock::time_point deadline) {
  timer_.expires_at(deadline);
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec) self->on_timer();
  });
}

void StoreSession::on_timer() {
  if (closed_) return;
  auto now = Clock::now();
  if (!handshake_done_ && ctx_.handshake_timeout.count() > 0) {
    if (now >= started_ + ctx_.handshake_timeout) {
      if (!must_authenticate() && ctx_.num_sessions <= ctx_.silent_close_above) {
        arm_timer(now + ctx_.handshake_timeout);  // no need of its room yet
        return;
      }
      fail(must_authenticate()
               ? "did not authenticate within " + secs(ctx_.handshake_timeout)
               : "sent no whole request within " + secs(ctx_.handshake_timeout));
      return;
    }
    arm_timer(started_ + ctx_.handshake_timeout);
    return;
  }
  if (ctx_.idle_timeout.count() == 0) return;
  if (!waits_.empty()) {  // a parked WAIT is not idleness
    arm_timer(now + ctx_.idle_timeout);
    return;
  }
  if (now >= last_activity_ + ctx_.idle_timeout) {
    if (ctx_.bad_input_log.allow()) {
      spdlog::info("store: closing connection from {}: idle for {} (--idle-timeout)",
                   peer_, secs(ctx_.idle_timeout));
    }
    close();
    return;
  }
  arm_timer(last_activity_ + ctx_.idle_timeout);
}

void StoreSession::fail(const std::string& why) {
  if (ctx_.bad_input_log.allow()) {
    spdlog::warn("store: closing connection from {}: {}", peer_, why);
  }
  // The replies to the requests before the bad one go out if the socket
  // takes them now (no waiting for a client that may never read).
  if (!write_in_flight_ && !out_.empty()) {
    boost::system::error_code ec;
    socket_.write_some(asio::buffer(out_), ec);
  }
  close();
}

}  // namespace ccrun::store
