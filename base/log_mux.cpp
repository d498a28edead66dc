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

FilteredLog::FilteredLog(std::string p, std::vector<std::string> n)
    : path(std::move(p)), needles(std::move(n)) {
  fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) spdlog::warn("cannot write {}: {}", path, std::strerror(errno));
}

FilteredLog::~FilteredLog() {
  if (fd >= 0) ::close(fd);
}

bool FilteredLog::matches(const std::string& line) const {
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

struct LogMux::Stream : std::enable_shared_from_this<Stream> {
  Stream(asio::io_context& io, int fd, StreamOptions o, std::function<void()> done,
         std::shared_ptr<std::vector<char>> shared_buffer)
      : pipe(io, fd), options(std::move(o)), on_closed(std::move(done)),
        buf(std::move(shared_buffer)) {
    boost::system::error_code ec;
    pipe.non_blocking(true, ec);  // read() below drains it without blocking
    if (!options.file.empty()) {
      file_fd = ::open(options.file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (file_fd < 0) {
        spdlog::warn("cannot write worker log {}: {}", options.file, std::strerror(errno));
      }
    }
  }
  ~Stream() {
    if (file_fd >= 0) ::close(file_fd);
  }

  // Waits until the pipe is readable, reads what is there into the shared
  // buffer (one read a wake-up, so a chatty worker cannot starve the
  // others), and waits again; EOF or an error ends the stream.
  void read() {
    pipe.async_wait(asio::posix::descriptor_base::wait_read,
                    [self = shared_from_this()](boost::system::error_code ec) {
                      if (ec) return self->closed();  // close_all(): cancelled
                      ssize_t n;
                      do {
                        n = ::read(self->pipe.native_handle(), self->buf->data(), self->buf->size());
                      } while (n < 0 && errno == EINTR);
                      if (n > 0) self->consume(self->buf->data(), size_t(n));
                      if (n == 0 || (n < 0 && errno != EAGAIN)) return self->closed();
                      self->read();
                    });
  }

  void closed() {
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
    for (size_t i = 0; i < n; ++i) {
      if (data[i] != '\n') continue;
      if (partial.empty()) {
        emit(std::string(data + start, i - start), 0);
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
    flush();
  }

  // The whole lines of one read go out in one write to the console and one
  // to the file: lines stay whole and in order, and a worker printing
  // thousands of lines a second costs a system call per read, not per line.
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
    if (!options.console_filter || options.console_filter(text)) to_console(text);
    shown = cr + 1;
  }

  // Writes `text` (ending in '\r' or '\n') to the console, each piece that
  // a '\r' starts again prefixed too, so a redrawn line keeps its prefix.
  void to_console(std::string_view text) {
    std::string out;
    out.reserve(options.prefix.size() + text.size() + 1);
    for (size_t start = 0; start < text.size();) {
      size_t cr = text.find('\r', start);
      size_t end = cr == std::string_view::npos ? text.size() : cr + 1;
      if (start == 0 || text.substr(start) != "\n") out += options.prefix;  // "\r\n": no prefix
      out.append(text.substr(start, end - start));
      start = end;
    }
    console_out += out;
  }

  // --collapse-output: a line to the collapser; a Python traceback, from its
  // header to its exception line (the first line not indented), as one.
  void to_collapser(std::string text) {
    static constexpr std::string_view kHeader = "Traceback (most recent call last):";
    if (block.empty() && text.compare(0, kHeader.size(), kHeader) != 0) {
      options.collapse->submit(options.rank, options.local_rank, text);
      return;
    }
    bool header = block.empty();
    block += (header ? "" : "\n") + text;
    ++block_lines;
    bool ends = !header && !text.empty() && text[0] != ' ';
    if (ends || block_lines >= kMaxBlockLines) {
      options.collapse->submit(options.rank, options.local_rank, block);
      block.clear();
      block_lines = 0;
    }
  }

  // A whole line; its first `already` bytes reached the console as redraws.
  void emit(const std::string& line, size_t already) {
    if (options.to_console) {
      std::string text = line.substr(already);
      if (!options.console_filter || options.console_filter(text)) {
        if (options.collapse) {
          to_collapser(std::move(text));
        } else {
          to_console(text + "\n");
        }
      }
    }
    std::string out = options.prefix + line + "\n";
    if (options.duplicate && options.duplicate->matches(line)) options.duplicate->write(out);
    if (file_fd >= 0) file_out += line + "\n";
    tail.add(line);
  }

  asio::posix::stream_descriptor pipe;
  StreamOptions options;
  std::function<void()> on_closed;
  std::shared_ptr<std::vector<char>> buf;  // the mux's (LogMux::buffer_)
  std::string partial;
  size_t shown = 0;  // bytes of `partial` already on the console (redraws)
  std::string block;  // --collapse-output: a traceback being read
  size_t block_lines = 0;
  static constexpr size_t kMaxBlockLines = 200;
  TailLines tail;
  int file_fd = -1;
  std::string console_out, file_out;  // this read's lines, until flush()
};

int LogMux::add(int fd, StreamOptions options, std::function<void()> on_closed) {
  auto s = std::make_shared<Stream>(io_, fd, std::move(options), std::move(on_closed), buffer_);
  streams_.push_back(s);
  s->read();
  return int(streams_.size() - 1);
}

void LogMux::close_all() {
  for (auto& s : streams_) {
    s->on_closed = nullptr;
    boost::system::error_code ec;
    s->pipe.close(ec);
  }
}

std::string LogMux::tail(int id) const {
  std::string out;
  if (id < 0 || size_t(id) >= streams_.size()) return out;
  return streams_[id]->tail.text();
}

void TailLines::add(const std::string& line) {
  size_t start = 0;
  for (;;) {
    size_t cr = line.find('\r', start);
    std::string piece = line.substr(start, cr == std::string::npos ? std::string::npos : cr - start);
    if (!piece.empty() || line.empty()) push(std::move(piece));  // an empty line stays one
    if (cr == std::string::npos) break;
    start = cr + 1;
  }
}

void TailLines::push(std::string piece) {
  if (piece.size() > kLineBytes) {
    size_t cut = piece.size() - kLineBytes;
    piece.resize(kLineBytes);
    piece += " [ccrun: " + std::to_string(cut) + " more bytes]";
  }
  bytes_ += piece.size() + 1;
  lines_.push_back(std::move(piece));
  while (lines_.size() > kLines || (bytes_ > kTotalBytes && lines_.size() > 1)) {
    bytes_ -= lines_.front().size() + 1;
    lines_.pop_front();
  }
}

std::string TailLines::text() const {
  std::string out;
  out.reserve(bytes_);
  for (const auto& l : lines_) out += l + "\n";
  return out;
}

}  // namespace ccrun
