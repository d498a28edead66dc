// One client connection of the store server (see store_session.h).
#include "store_session.h"

#include <spdlog/spdlog.h>

#include <array>

namespace ccrun::rendezvous {
namespace asio = boost::asio;
using wire::Query;

namespace {

// Bytes a parked session may buffer from its client before it stops reading
// (its later requests wait behind the parked one anyway).
constexpr size_t kMaxBufferedWhileParked = 1024 * 1024;

// Reads per readiness event before yielding to other sessions.
constexpr int kReadsPerEvent = 16;

std::string describe(const asio::ip::tcp::socket& socket) {
  boost::system::error_code ec;
  auto ep = socket.remote_endpoint(ec);
  if (ec) return "an unknown peer";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
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

}  // namespace

StoreSession::StoreSession(asio::ip::tcp::socket socket, ServerContext& ctx)
    : socket_(std::move(socket)), ctx_(ctx), peer_(describe(socket_)) {
  ++ctx_.num_sessions;
  ctx_.sessions.insert(this);
}

StoreSession::~StoreSession() { close(); }

void StoreSession::start() {
  boost::system::error_code ec;
  socket_.non_blocking(true, ec);
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  spdlog::debug("store: connection from {}", peer_);
  do_read();
}

void StoreSession::close() {
  if (closed_) return;
  closed_ = true;
  cancel_wait();
  boost::system::error_code ec;
  socket_.close(ec);
  --ctx_.num_sessions;
  ctx_.sessions.erase(this);
}

bool StoreSession::paused() const {
  return out_.size() + writing_.size() > ctx_.max_pending_output ||
         (waiter_ && in_.size() > kMaxBufferedWhileParked);
}

void StoreSession::do_read() {
  if (closed_ || reading_ || paused()) return;
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
  // The small first buffer was filled: the rest waits in the socket.
  thread_local std::array<char, 64 * 1024> buffer;
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
  process();
  if (eof) {
    if (!closed_ && !in_.empty() && !waiter_) {
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
  while (!closed_ && pos < in_.size()) {
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
    auto r = wire::parse_request(view, dialect_, ctx_.limits, req_);
    if (r.status == wire::ParseStatus::kNeedMore) {
      in_needed_ = r.needed;
      break;
    }
    if (r.status == wire::ParseStatus::kError) {
      fail(r.error);
      return;
    }
    in_needed_ = 0;
    // A parked request holds back the ones behind it, but CANCEL_WAIT.
    if (waiter_ && req_.type != Query::kCancelWait) break;
    pos += r.consumed;
    handle(req_);
  }
  if (closed_) return;
  in_.erase(0, pos);
  flush();
}

void StoreSession::handle(wire::Request& req) {
  if (!ctx_.token.empty() && !authenticated_ && req.type != Query::kValidate &&
      req.type != Query::kAuthenticate) {
    fail("sent " + wire::query_name(req.type) +
         " before authenticating; this store requires a token");
    return;
  }
  KeyTable& table = ctx_.table;
  switch (req.type) {
    case Query::kValidate:
      if (req.u32 != wire::kValidationMagic) {
        fail("VALIDATE with a wrong magic number; not a TCPStore client?");
      }
      return;
    case Query::kAuthenticate:
      if (ctx_.token.empty() || constant_time_equal(req.keys[0], ctx_.token)) {
        authenticated_ = true;
        wire::append_u8(out_, uint8_t(wire::AuthResponse::kAccepted));
      } else {
        spdlog::warn("store: connection from {} presented a wrong token; "
                     "closing it", peer_);
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
      if (!now) {
        if (expected.empty()) {
          wire::append_bytes(out_, desired);
          table.set(key, std::move(desired));
        } else {
          wire::append_bytes(out_, expected);
        }
      } else if (*now == expected) {
        wire::append_bytes(out_, desired);
        table.set(key, std::move(desired));
      } else {
        wire::append_bytes(out_, *now);
      }
      return;
    }
    case Query::kGet:
      if (req.legacy_watch) {
        fail("WATCH_KEY is not supported by ccrun's store");
        return;
      }
      if (const std::string* v = table.find(req.keys[0])) {
        wire::append_bytes(out_, *v);
      } else {
        park(req);
      }
      return;
    case Query::kAdd: {
      int64_t value = 0;
      if (!table.add(req.keys[0], req.delta, value)) {
        fail("ADD on key \"" + req.keys[0] +
             "\", whose value is not an integer counter");
        return;
      }
      wire::append_i64(out_, value);
      return;
    }
    case Query::kCheck: {
      bool ready = true;
      for (const auto& k : req.keys) ready = ready && table.find(k);
      wire::append_u8(out_, uint8_t(ready ? wire::CheckResponse::kReady
                                          : wire::CheckResponse::kNotReady));
      return;
    }
    case Query::kWait:
    case Query::kMultiGet:
      park(req);
      return;
    case Query::kGetNumKeys:
      wire::append_i64(out_, static_cast<int64_t>(table.size()));
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
      cancel_wait();
      wire::append_u8(out_, uint8_t(wire::WaitResponse::kWaitCanceled));
      return;
    case Query::kPing:
      wire::append_u32(out_, req.u32);
      return;
  }
}

void StoreSession::park(wire::Request& req) {
  parked_ = std::move(req);
  waiter_ = std::make_shared<KeyWaiter>();
  if (ctx_.table.park(waiter_, parked_.keys)) {
    reply_parked();
    return;
  }
  // The waiter holds the session: a parked session may have no read or
  // write armed. close() cancels the waiter, which breaks the cycle.
  waiter_->on_ready = [self = shared_from_this()] { self->on_wait_ready(); };
}

void StoreSession::on_wait_ready() {
  if (closed_) return;
  reply_parked();
  // Called from inside another session's request: resume this one later.
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    if (self->closed_) return;
    self->process();
    self->do_read();
  });
}

void StoreSession::reply_parked() {
  const KeyTable& table = ctx_.table;
  switch (parked_.type) {
    case Query::kWait:
      wire::append_u8(out_, uint8_t(wire::WaitResponse::kStopWaiting));
      break;
    case Query::kGet:
    case Query::kMultiGet:
      for (const auto& k : parked_.keys) {
        const std::string* v = table.find(k);
        wire::append_bytes(out_, v ? std::string_view(*v) : std::string_view());
      }
      break;
    default:
      break;
  }
  waiter_.reset();
  parked_.clear();
}

void StoreSession::cancel_wait() {
  if (!waiter_) return;
  ctx_.table.cancel(waiter_);
  waiter_.reset();
  parked_.clear();
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
  do_read();
}

void StoreSession::fail(const std::string& why) {
  spdlog::warn("store: closing connection from {}: {}", peer_, why);
  close();
}

}  // namespace ccrun::rendezvous
