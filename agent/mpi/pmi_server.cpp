// One node's PMI-1 server (see pmi_server.h): a session per local rank on
// the agent's io_context, the job's key-value space and barriers in the
// job's store, reached from one thread of the server's.
#include "mpi/pmi_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <deque>
#include <spdlog/spdlog.h>

#include "ccrun/error.h"

namespace ccrun::agent::mpi {

namespace asio = boost::asio;

// What a handler checks before it touches the server: null once it is gone.
struct PmiServer::Life {
  PmiServer* server = nullptr;
};

// One local rank's connection: read a line, handle it, read the next; one
// write in flight, the rest queued. An error or a line that is not a
// request ends this session, never the server.
class PmiServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(asio::io_context& io, int fd, int local_rank, std::shared_ptr<Life> life)
      : socket_(io), local_rank_(local_rank), life_(std::move(life)) {
    socket_.assign(asio::local::stream_protocol(), fd);
  }

  int local_rank() const { return local_rank_; }
  bool open() const { return socket_.is_open(); }

  void start() { do_read(); }

  void send(std::string line) {
    if (!open()) return;
    out_.push_back(std::move(line));
    if (out_.size() == 1) do_write();
  }

  void close() {
    boost::system::error_code ec;
    socket_.close(ec);  // closing a socket that is closed: nothing to say
  }

 private:
  void do_read() {
    asio::async_read_until(socket_, in_, '\n',
                           [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                             self->on_read(ec, n);
                           });
  }

  void on_read(boost::system::error_code ec, size_t n) {
    if (!life_->server) return;
    if (ec) {
      // EOF (the rank finalized or died), or a line over kMaxLine.
      if (ec != asio::error::eof && ec != asio::error::operation_aborted) {
        spdlog::warn("ccrun: --mpi: local rank {}'s PMI connection: {}; closed", local_rank_,
                     ec == asio::error::not_found ? "a line longer than " + std::to_string(kMaxLine)
                                                  : ec.message());
      }
      close();
      return;
    }
    std::string line(asio::buffers_begin(in_.data()), asio::buffers_begin(in_.data()) + n);
    in_.consume(n);
    std::optional<PmiRequest> r = parse_request(line);
    if (!r) {
      spdlog::warn("ccrun: --mpi: local rank {} sent a line that is not a PMI-1 request; its "
                   "connection is closed", local_rank_);
      close();
      return;
    }
    life_->server->handle(*this, *r);
    if (open()) do_read();
  }

  void do_write() {
    asio::async_write(socket_, asio::buffer(out_.front()),
                      [self = shared_from_this()](boost::system::error_code ec, size_t) {
                        if (!self->life_->server) return;
                        if (ec) return self->close();
                        self->out_.pop_front();
                        if (!self->out_.empty()) self->do_write();
                      });
  }

  asio::local::stream_protocol::socket socket_;
  asio::streambuf in_{kMaxLine};
  std::deque<std::string> out_;
  int local_rank_;
  std::shared_ptr<Life> life_;
};

[[gnu::cold]] PmiServer::PmiServer(asio::io_context& io, PmiServerOptions options, StoreOpener open_store,
                     AbortHandler on_abort, ErrorHandler on_error)
    : io_(io),
      options_(std::move(options)),
      open_store_(std::move(open_store)),
      on_abort_(std::move(on_abort)),
      on_error_(std::move(on_error)),
      life_(std::make_shared<Life>(Life{this})),
      interrupt_(std::make_shared<store::StoreInterrupt>()) {}

[[gnu::cold]] PmiServer::~PmiServer() {
  life_->server = nullptr;
  interrupt_->trigger();  // a barrier's wait, a store that does not answer
  thread_.stop();
  thread_.join();
  for (auto& s : sessions_) s->close();
  close_worker_ends();
}

[[gnu::cold]] int PmiServer::channel(int local_rank) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw Error(std::string("--mpi: cannot make local rank ") + std::to_string(local_rank) +
                "'s PMI socket pair: " + std::strerror(errno));
  }
  auto s = std::make_shared<Session>(io_, sv[0], local_rank, life_);
  sessions_.push_back(s);
  worker_ends_.push_back(sv[1]);
  s->start();
  return sv[1];
}

[[gnu::cold]] void PmiServer::close_worker_ends() {
  for (int fd : worker_ends_) ::close(fd);
  worker_ends_.clear();
}

[[gnu::cold]] std::vector<std::pair<std::string, std::string>> PmiServer::variables(int local_rank) const {
  return {{"PMI_FD", std::to_string(kWorkerPmiFd)},
          {"PMI_RANK", std::to_string(options_.rank_offset + local_rank)},
          {"PMI_SIZE", std::to_string(options_.job.world_size)}};
}

[[gnu::cold]] void PmiServer::handle(Session& s, const PmiRequest& r) {
  PmiAction a = decide(r, options_.job);
  switch (a.kind) {
    case PmiAction::Kind::kReply:
    case PmiAction::Kind::kFinalize:
      s.send(std::move(a.reply));
      return;
    case PmiAction::Kind::kPut:
      put(a.key, a.value);
      s.send(std::move(a.reply));
      return;
    case PmiAction::Kind::kGet:
      get(s.shared_from_this(), a.key);
      return;
    case PmiAction::Kind::kBarrier:
      enter_barrier();
      return;
    case PmiAction::Kind::kAbort:
      // No reply: the client waits for its end (mpiexec kills it too).
      on_abort_(s.local_rank(), a.exit_code, a.message);
      return;
    case PmiAction::Kind::kClose:
      s.close();
      return;
  }
}

[[gnu::cold]] void PmiServer::put(const std::string& key, const std::string& value) {
  known_[key] = value;
  unsent_[key] = value;
}

[[gnu::cold]] void PmiServer::get(const std::shared_ptr<Session>& s, const std::string& key) {
  if (auto it = known_.find(key); it != known_.end()) {
    s->send(get_reply(key, it->second));
    return;
  }
  auto& waiting = fetching_[key];
  waiting.push_back(s);
  if (waiting.size() > 1) return;  // one read for the node
  on_store([key, stored = kvs_key(key)](store::Store& st) -> Then {
    std::optional<std::string> value;
    if (st.check({stored})) value = st.get(stored);
    return [key, value](PmiServer& p) { p.fetched(key, value); };
  });
}

[[gnu::cold]] void PmiServer::fetched(const std::string& key, std::optional<std::string> value) {
  if (value) known_[key] = *value;
  auto waiting = std::move(fetching_[key]);
  fetching_.erase(key);
  for (auto& s : waiting) s->send(get_reply(key, value));
}

[[gnu::cold]] void PmiServer::enter_barrier() {
  if (++in_barrier_ < options_.local_ranks) return;
  std::vector<std::string> keys, values;
  for (auto& [k, v] : unsent_) {
    keys.push_back(kvs_key(k));
    values.push_back(std::move(v));
  }
  unsent_.clear();
  std::string counter = options_.key_prefix + "barrier/" + std::to_string(barriers_);
  on_store([keys, values, counter, local = options_.local_ranks,
            world = options_.job.world_size,
            timeout = options_.barrier_timeout](store::Store& st) -> Then {
    if (!keys.empty()) st.multi_set(keys, values);
    std::string done = counter + "/done";
    if (st.add(counter, local) >= world) {
      st.set(done, "1");
    } else {
      st.wait({done}, timeout);
    }
    return [](PmiServer& p) { p.barrier_done(); };
  });
}

[[gnu::cold]] void PmiServer::barrier_done() {
  in_barrier_ = 0;
  ++barriers_;
  for (auto& s : sessions_) s->send(format_reply("barrier_out", {{"rc", "0"}}));
}

[[gnu::cold]] void PmiServer::fail(const std::string& what) {
  if (failed_) return;
  failed_ = true;
  for (auto& s : sessions_) s->close();
  on_error_(what);
}

[[gnu::cold]] void PmiServer::on_store(StoreCall call) {
  asio::post(thread_, [this, call = std::move(call), life = life_, &io = io_] {
    Then then;
    std::string error;
    try {
      // The thread is the server's: `this` lives until it was joined.
      if (!store_) store_ = open_store_(interrupt_);
      then = call(*store_);
    } catch (const InterruptedError&) {
      return;  // the server is going: nobody waits for the answer
    } catch (const std::exception& e) {
      error = e.what();
    }
    asio::post(io, [life, then = std::move(then), error] {
      if (!life->server) return;
      if (!error.empty()) return life->server->fail("the job's store: " + error);
      then(*life->server);
    });
  });
}

}  // namespace ccrun::agent::mpi
