// Workers' output to the console and to files, line by line (see log_mux.h).
#include "log_mux.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>

namespace ccrun {
namespace asio = boost::asio;

namespace {

constexpr const char* kSplitMarker = " [ccrun: line longer than 1 MiB, continued]";

}  // namespace

int write_all(int fd, std::string_view s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : ENOSPC;
    done += size_t(n);
  }
  return 0;
}

struct BatchedWriter::Pending {
  int fd;
  std::string text;
  bool posted = false;
  void write() {
    if (!text.empty()) (void)write_all(fd, text);  // a console: its failure must not stop the job
    text.clear();
  }
};

BatchedWriter::BatchedWriter(asio::io_context& io, int fd)
    : io_(io), pending_(std::make_shared<Pending>(Pending{fd, {}})) {}

BatchedWriter::~BatchedWriter() { pending_->write(); }

void BatchedWriter::append(std::string_view text) {
  pending_->text += text;
  if (pending_->posted) return;
  pending_->posted = true;
  asio::post(io_, [p = pending_] {
    p->posted = false;
    p->write();
  });
}

void BatchedWriter::flush() { pending_->write(); }

FilteredLog::FilteredLog(std::string p, std::vector<std::string> n)
    : path(std::move(p)), needles(std::move(n)) {
  fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) spdlog::warn("cannot write {}: {}", path, std::strerror(errno));
}

FilteredLog::~FilteredLog() {
  if (fd >= 0) ::close(fd);
}

bool FilteredLog::matches(std::string_view line) const {
  for (const auto& n : needles) {
    if (line.find(n) != std::string::npos) return true;
  }
  return false;
}

void FilteredLog::write(const std::string& text) {
  if (fd < 0) return;
  if (int err = write_all(fd, text); err != 0) {
    std::fprintf(stderr, "ccrun: cannot write %s: %s; its later lines are not saved\n", path.c_str(),
                 std::strerror(err));
    ::close(fd);
    fd = -1;
  }
}

// The streams read on the shared tick (see log_mux.h). Held by the mux and
// by the tick's pending wait, so that a wait completing after the mux is
// gone touches nothing of it.
struct LogMux::Ticker : std::enable_shared_from_this<Ticker> {
  explicit Ticker(asio::io_context& io) : timer(io) {}

  void add(std::shared_ptr<Stream> s);
  void tick();
  void release_all();
  void arm();

  asio::steady_timer timer;
  std::vector<std::shared_ptr<Stream>> streams;
  bool armed = false;
};

struct LogMux::Stream : std::enable_shared_from_this<Stream> {
  Stream(asio::io_context& io, int fd, StreamOptions o, std::function<void()> done,
         std::shared_ptr<std::vector<char>> shared_buffer, std::shared_ptr<Ticker> t)
      : pipe(io, fd), fd(fd), options(std::move(o)), on_closed(std::move(done)),
        buf(std::move(shared_buffer)), ticker(std::move(t)), quiet(io) {
    boost::system::error_code ec;
    pipe.non_blocking(true, ec);  // pull() below reads without blocking
    if (!options.file.empty()) {
      file_fd = ::open(options.file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (file_fd < 0) {
        spdlog::warn("cannot write worker log {}: {}", options.file, std::strerror(errno));
      }
    }
  }
  ~Stream() {
    if (file_fd >= 0) ::close(file_fd);
    if (released && fd >= 0) ::close(fd);  // the tick's: `pipe` does not own it
  }

  enum class Pulled { kSome, kFull, kNone, kEnd };

  // One read of what the pipe holds into the shared buffer (one a wake-up
  // or a tick, so a chatty worker cannot starve the others), its lines
  // passed on; the console's and the file's still to write (flush()).
  Pulled pull() {
    ssize_t n;
    do {
      n = ::read(fd, buf->data(), buf->size());
    } while (n < 0 && errno == EINTR);
    if (n > 0) consume(buf->data(), size_t(n));
    if (n > 0) return size_t(n) == buf->size() ? Pulled::kFull : Pulled::kSome;
    return n < 0 && errno == EAGAIN ? Pulled::kNone : Pulled::kEnd;
  }

  // Waits until the pipe is readable (EOF and errors too), then reads it.
  void wait() {
    if (released) {  // back from the tick
      pipe.assign(fd);
      released = false;
    }
    pipe.async_wait(asio::posix::descriptor_base::wait_read,
                    [self = shared_from_this()](boost::system::error_code ec) {
                      if (ec) return self->closed();  // close_all(): cancelled
                      self->readable();
                    });
  }

  // A wake-up: a stream that writes again within kBusyGap goes to the tick.
  void readable() {
    Pulled p = pull();
    flush();
    if (p == Pulled::kEnd) return closed();
    auto now = std::chrono::steady_clock::now();
    bool busy = ticker && p == Pulled::kSome && now - last_data < LogMux::kBusyGap;
    if (p != Pulled::kNone) last_data = now;
    if (!busy) return wait();
    // Out of the agent's epoll while on the tick: registered, each of the
    // worker's writes would still wake the agent.
    fd = pipe.release();
    released = true;
    ticker->add(shared_from_this());
  }

  void closed() {
    quiet.cancel();
    if (!partial.empty()) emit(partial, shown);
    partial.clear();
    shown = 0;
    flush();
    if (!block.empty()) options.collapse->submit(options.rank, options.local_rank, block);
    block.clear();
    if (on_closed) on_closed();
  }

  void consume(const char* data, size_t n) {
    size_t start = 0;
    for (const char* nl; (nl = static_cast<const char*>(std::memchr(data + start, '\n', n - start)));) {
      size_t i = size_t(nl - data);
      if (partial.empty()) {
        emit(std::string_view(data + start, i - start), 0);
      } else {
        partial.append(data + start, i - start);
        emit(partial, shown);
        partial.clear();
        shown = 0;
      }
      start = i + 1;
    }
    partial.append(data + start, n - start);
    while (partial.size() >= LogMux::kMaxLineBytes) {
      std::string piece = partial.substr(0, LogMux::kMaxLineBytes);
      partial.erase(0, LogMux::kMaxLineBytes);
      emit(piece + kSplitMarker, std::min(shown, piece.size()));
      shown = shown > piece.size() ? shown - piece.size() : 0;
    }
    show_redraws();
    if (shows_partials() && partial.size() > shown) arm_quiet();
  }

  // The console gets a line's parts as they are written (a prompt, a
  // progress bar), where nothing needs it whole: not the collapser, not a
  // console filter (the fan-out's), and not when it is not shown at all.
  bool shows_partials() const {
    return options.to_console && !options.collapse && !options.console_filter;
  }

  // The console's cursor is inside this stream's line: its first `shown`
  // bytes reached the console, and they did not end in '\r'.
  bool mid_line() const { return shown > 0 && partial[shown - 1] != '\r'; }

  // A part of a line that no more output followed for kPartialWait goes to
  // the console then; the rest of the line follows it without a prefix.
  void arm_quiet() {
    quiet.expires_after(LogMux::kPartialWait);
    quiet.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->partial.size() <= self->shown) return;
      self->to_console(std::string_view(self->partial).substr(self->shown), self->mid_line());
      self->shown = self->partial.size();
      self->flush();
    });
  }

  // The whole lines read go out in one write to the console and one to the
  // file: lines stay whole and in order, and a worker printing thousands
  // of lines a second costs a system call per read, not per line. (On the
  // tick, the ticker takes the console's part first, for one write of all.)
  void flush() {
    if (!console_out.empty()) (void)write_all(options.console_fd, console_out);  // a closed console must not stop the job
    console_out.clear();
    if (!file_out.empty() && file_fd >= 0) {
      if (int err = write_all(file_fd, file_out); err != 0) {
        std::fprintf(stderr, "ccrun: cannot write %s: %s; its later lines are not saved\n",
                     options.file.c_str(), std::strerror(err));
        ::close(file_fd);
        file_fd = -1;
      }
    }
    file_out.clear();
  }

  // A line still being drawn ('\r' without '\n' yet: a progress bar) is
  // shown up to its last '\r' now, not when its '\n' comes.
  void show_redraws() {
    size_t cr = partial.rfind('\r');
    if (!options.to_console || options.collapse || cr == std::string::npos || cr < shown) return;
    std::string text = partial.substr(shown, cr + 1 - shown);
    bool continues = mid_line();
    if (!options.console_filter || options.console_filter(text)) to_console(text, continues);
    shown = cr + 1;
  }

  // Appends `text` for the console, each piece that starts a line prefixed:
  // the first unless it `continues` a line whose start is on the console
  // already, and each that a '\r' starts again, so a redrawn line keeps its
  // prefix ("\r\n" ends one: no prefix for the "\n").
  void to_console(std::string_view text, bool continues) {
    for (size_t start = 0; start < text.size();) {
      size_t cr = text.find('\r', start);
      size_t end = cr == std::string_view::npos ? text.size() : cr + 1;
      bool line_start = start == 0 ? !continues : text.substr(start) != "\n";
      if (line_start) console_out += options.prefix;
      console_out.append(text.substr(start, end - start));
      start = end;
    }
  }

  // --collapse-output: a line to the collapser; a Python traceback, from its
  // header to its exception line (the first line not indented), as one.
  void to_collapser(std::string_view text) {
    static constexpr std::string_view kHeader = "Traceback (most recent call last):";
    if (block.empty() && !text.starts_with(kHeader)) {
      options.collapse->submit(options.rank, options.local_rank, text);
      return;
    }
    bool header = block.empty();
    if (!header) block += '\n';
    block += text;
    ++block_lines;
    bool ends = !header && !text.empty() && text[0] != ' ';
    if (ends || block_lines >= kMaxBlockLines) {
      options.collapse->submit(options.rank, options.local_rank, block);
      block.clear();
      block_lines = 0;
    }
  }

  // A line's console part (from `already`), with its '\n'.
  void line_to_console(std::string_view line, size_t already) {
    std::string_view rest = line.substr(already);
    bool continues = already > 0 && line[already - 1] != '\r';
    if (!options.console_filter) {  // the common line: no copy of it on the way
      if (options.collapse) return to_collapser(rest);
      if (rest.find('\r') == std::string_view::npos) {
        if (!continues) console_out += options.prefix;
        console_out += rest;
        console_out += '\n';
        return;
      }
    }
    std::string text(rest);
    if (options.console_filter && !options.console_filter(text)) return;
    if (options.collapse) return to_collapser(text);
    text += '\n';
    to_console(text, continues);
  }

  // A whole line; its first `already` bytes reached the console as redraws.
  void emit(std::string_view line, size_t already) {
    if (options.to_console) line_to_console(line, already);
    if (options.duplicate && options.duplicate->matches(line)) {
      options.duplicate->write(options.prefix + std::string(line) + "\n");
    }
    if (file_fd >= 0) {
      file_out += line;
      file_out += '\n';
    }
    tail.add(line);
  }

  asio::posix::stream_descriptor pipe;  // open while it waits; released on the tick
  int fd;                               // the pipe's read end: `pipe`'s, or this stream's while released
  bool released = false;                // on the tick: out of `pipe` (and the agent's epoll)
  StreamOptions options;
  std::function<void()> on_closed;
  std::shared_ptr<std::vector<char>> buf;  // the mux's (LogMux::buffer_)
  std::shared_ptr<Ticker> ticker;          // the mux's; null: read at every wake-up
  std::chrono::steady_clock::time_point last_data;  // the last read that found output
  int idle_ticks = 0;                      // on the tick: ticks in a row without output
  std::string partial;
  size_t shown = 0;  // bytes of `partial` already on the console (redraws, quiet parts)
  asio::steady_timer quiet;  // kPartialWait after a read that left a part of a line
  std::string block;  // --collapse-output: a traceback being read
  size_t block_lines = 0;
  static constexpr size_t kMaxBlockLines = 200;
  TailLines tail;
  int file_fd = -1;
  std::string console_out, file_out;  // lines read, until flush()
};

void LogMux::Ticker::add(std::shared_ptr<Stream> s) {
  s->idle_ticks = 0;
  streams.push_back(std::move(s));
  arm();
}

void LogMux::Ticker::arm() {
  if (armed) return;
  armed = true;
  timer.expires_after(LogMux::kTick);
  timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    self->armed = false;
    if (!ec) self->tick();
  });
}

// Reads each stream on the tick once. The console lines of all go out in
// one write per console; a stream leaves the tick for its own wake-ups when
// it was idle kIdleTicks ticks, filled the buffer (it is read at full speed
// there) or ended (its wait sees the end at once, and closes it there).
void LogMux::Ticker::tick() {
  std::string console[2];
  auto now = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<Stream>> stay;
  for (auto& s : streams) {
    Stream::Pulled p = s->pull();
    console[s->options.console_fd == 2 ? 1 : 0] += s->console_out;
    s->console_out.clear();
    s->flush();  // its file
    if (p == Stream::Pulled::kSome || p == Stream::Pulled::kFull) {
      s->idle_ticks = 0;
      s->last_data = now;
    }
    if (p == Stream::Pulled::kSome || (p == Stream::Pulled::kNone && ++s->idle_ticks < kIdleTicks)) {
      stay.push_back(s);
    } else {
      s->wait();
    }
  }
  streams = std::move(stay);
  if (!console[0].empty()) (void)write_all(1, console[0]);
  if (!console[1].empty()) (void)write_all(2, console[1]);
  if (!streams.empty()) arm();
}

void LogMux::Ticker::release_all() {
  auto all = std::move(streams);
  streams.clear();
  for (auto& s : all) s->wait();
}

LogMux::LogMux(asio::io_context& io, Reading reading)
    : io_(io), buffer_(std::make_shared<std::vector<char>>(kReadBytes)),
      ticker_(reading == Reading::kTickWhenBusy ? std::make_shared<Ticker>(io) : nullptr) {}

int LogMux::add(int fd, StreamOptions options, std::function<void()> on_closed) {
  auto s = std::make_shared<Stream>(io_, fd, std::move(options), std::move(on_closed), buffer_,
                                    ticker_);
  streams_.push_back(s);
  s->wait();
  return int(streams_.size() - 1);
}

void LogMux::wake(int id) {
  if (!ticker_ || id < 0 || size_t(id) >= streams_.size()) return;
  auto& ticked = ticker_->streams;
  auto it = std::find(ticked.begin(), ticked.end(), streams_[size_t(id)]);
  if (it == ticked.end()) return;  // waiting on its own pipe already
  auto s = *it;
  ticked.erase(it);
  s->wait();
}

void LogMux::wake_all() {
  if (ticker_) ticker_->release_all();
}

void LogMux::close_all() {
  std::vector<std::shared_ptr<Stream>> ticked;
  boost::system::error_code ec;
  if (ticker_) {
    ticked = std::move(ticker_->streams);
    ticker_->streams.clear();
    ticker_->timer.cancel(ec);
  }
  for (auto& s : streams_) {
    s->on_closed = nullptr;
    s->quiet.cancel();
    s->pipe.close(ec);
  }
  for (auto& s : ticked) {
    ::close(std::exchange(s->fd, -1));
    s->closed();  // no wait pending to do it: what it holds goes out
  }
}

std::string LogMux::tail(int id) const {
  std::string out;
  if (id < 0 || size_t(id) >= streams_.size()) return out;
  return streams_[id]->tail.text();
}

void TailLines::add(std::string_view line) {
  size_t start = 0;
  for (;;) {
    size_t cr = line.find('\r', start);
    std::string_view piece = line.substr(start, cr == std::string_view::npos ? std::string_view::npos : cr - start);
    if (!piece.empty() || line.empty()) push(piece);  // an empty line stays one
    if (cr == std::string_view::npos) break;
    start = cr + 1;
  }
}

void TailLines::drop_oldest() {
  bytes_ -= ring_[first_].size() + 1;
  first_ = (first_ + 1) % kLines;
  --count_;
}

void TailLines::push(std::string_view piece) {
  if (count_ == kLines) drop_oldest();  // its string is reused for the newest
  std::string& slot = ring_[(first_ + count_) % kLines];
  ++count_;
  if (piece.size() > kLineBytes) {
    slot.assign(piece.substr(0, kLineBytes));
    slot += " [ccrun: " + std::to_string(piece.size() - kLineBytes) + " more bytes]";
  } else {
    slot.assign(piece);
  }
  bytes_ += slot.size() + 1;
  while (bytes_ > kTotalBytes && count_ > 1) drop_oldest();
}

std::string TailLines::text() const {
  std::string out;
  out.reserve(bytes_);
  for (size_t i = 0; i < count_; ++i) {
    out += ring_[(first_ + i) % kLines];
    out += '\n';
  }
  return out;
}

}  // namespace ccrun
