//===- log_mux.h - Workers' output to the console and to files --*- C++ -*-===//
//
// `LogMux` reads each worker's stdout and stderr pipes on the agent's
// io_context, cuts the bytes into whole lines and writes them, each
// prefixed "[rank]:", to the agent's own stdout/stderr (unless redirected or
// filtered out) and to the rank's log files: the whole lines of one read in
// one write() call to each. A last line without '\n' is written when its
// pipe closes. The console also gets a line as it is written: a part of a
// line that nothing followed for kPartialWait (a prompt, "loading... ")
// is shown then, prefixed, and the rest of the line follows it without a
// second prefix; a line redrawn with '\r' (a progress bar) shows each redraw,
// prefixed, when it is written. Its file, the failure report's tail, the
// collapser and the fan-out's console filter get whole lines only. A line longer than kMaxLineBytes is written
// in pieces of that size, each ending in a marker, so one worker printing
// without newlines cannot exhaust the agent's memory. A log file that
// cannot be written (a full disk) is reported once on stderr.
//
// A stream is read when its pipe wakes the agent, until it writes again
// within kBusyGap: then it leaves the agent's epoll and is read on a tick
// the busy streams share (kTick), their console lines in one write a tick,
// and goes back to its own wake-ups after kIdleTicks ticks without output.
// Eight ranks printing 10,000 lines a second then wake the agent 25 times a
// second instead of 400 (a wake-up costs more than the lines it carries).
// A line waits at most one tick (torchrun's --tee copies every 100 ms); a
// stream that fills the read buffer is read at every wake-up again, at full
// speed; a worker's exit brings its streams back at once (wake()).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <utility>
#include <boost/asio.hpp>
#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>


namespace ccrun {

// Writes all of `s` to `fd`, again after EINTR and short writes. Returns 0,
// or the errno of the write that failed (ENOSPC for one that wrote nothing).
// A console's caller ignores it: a closed console must not stop the job.
int write_all(int fd, std::string_view s);

// Text for one descriptor gathered while a handler runs and written with
// one write() once it returns (posted on the io_context): what the lines of
// one read make, however many, costs one system call. flush() writes now;
// so does the destructor, so nothing held is lost.
class BatchedWriter {
 public:
  BatchedWriter(boost::asio::io_context& io, int fd);
  ~BatchedWriter();
  BatchedWriter(const BatchedWriter&) = delete;  // one pending write
  BatchedWriter& operator=(const BatchedWriter&) = delete;

  // Appends `text` and makes sure a write follows.
  void append(std::string_view text);
  // Writes what it holds now (before what must come after it).
  void flush();

 private:
  struct Pending;
  boost::asio::io_context& io_;
  std::shared_ptr<Pending> pending_;  // shared with the posted write
};

// Where a stream's console lines go instead of the console: one call per
// line, or per Python traceback whole (the agent's --collapse-output,
// ccrun/console_collapse.h).
class LineSink {
 public:
  virtual ~LineSink() = default;
  virtual void submit(int rank, int local_rank, std::string_view text) = 0;
  // Passes on now whatever it still holds.
  virtual void flush_all() {}
};

// torch 2.x's --duplicate-stdout-filters/--duplicate-stderr-filters: one
// file, shared by the ranks' streams, that also gets each line holding any
// of `needles` (a plain substring), with the line's prefix. Opened by
// open(); a failed write is reported once and ends the copy.
struct FilteredLog {
  FilteredLog(std::string path, std::vector<std::string> needles);
  ~FilteredLog();
  FilteredLog(const FilteredLog&) = delete;  // owns a descriptor
  FilteredLog& operator=(const FilteredLog&) = delete;
  // Whether `line` holds one of the needles.
  [[nodiscard]] bool matches(std::string_view line) const;
  // Appends `text` (whole lines) with one write.
  void write(const std::string& text);

  std::string path;
  std::vector<std::string> needles;
  int fd = -1;
};

struct StreamOptions {
  std::string prefix;     // "[3]:"; empty = none
  bool to_console = true;
  int console_fd = 1;     // 1 or 2
  std::string file;       // log file path; empty = none
  // Sees each line (or, while it is redrawn, each part of it that ends in
  // '\r') before the console does and may rewrite it; false keeps it off the
  // console (the file and the tail still get it).
  std::function<bool(std::string& text)> console_filter;
  // Matching lines are copied here too (the line as the console shows it).
  std::shared_ptr<FilteredLog> duplicate;
  // --collapse-output: the console lines go here, a Python traceback as one
  // unit, as rank `rank` (local `local_rank`) printed them; the prefix is
  // the collapser's. Redraws ('\r') then wait for their '\n'.
  std::shared_ptr<LineSink> collapse;
  int rank = -1, local_rank = -1;
};

// The last lines of a stream, for a failure report: they travel through the
// store and are printed on the console, so they are bounded in bytes, not
// only in lines. A `\r` ends a line here too: a progress bar redrawn 10,000
// times is 10,000 short lines, of which the last few are kept, not one line
// of megabytes.
class TailLines {
 public:
  static constexpr size_t kLines = 12;
  static constexpr size_t kLineBytes = 400;   // a longer line keeps its start and says so
  static constexpr size_t kTotalBytes = 4096;  // the oldest lines go first

  // Adds one output line (without its '\n'). Allocates nothing once the
  // kept lines' strings have grown: it runs for every line a worker prints.
  void add(std::string_view line);
  // The lines kept, oldest first, each ending in '\n'.
  std::string text() const;

 private:
  void push(std::string_view piece);
  void drop_oldest();
  std::array<std::string, kLines> ring_;  // ring_[(first_ + i) % kLines], i < count_
  size_t first_ = 0, count_ = 0;
  size_t bytes_ = 0;
};

class LogMux {
 public:
  static constexpr size_t kMaxLineBytes = 1 << 20;

  // How streams are read: kTickWhenBusy as said above; kEveryWake reads
  // each at each wake-up: where one console carries many nodes' lines (the
  // fan-out's launcher and the agents it starts), so that a node's failure
  // report, read at once, does not overtake the lines other nodes printed
  // before it.
  enum class Reading { kTickWhenBusy, kEveryWake };

  explicit LogMux(boost::asio::io_context& io, Reading reading = Reading::kTickWhenBusy);
  ~LogMux() { close_all(); }
  LogMux(const LogMux&) = delete;  // owns pipes
  LogMux& operator=(const LogMux&) = delete;

  // Starts reading `fd` (takes ownership). `on_closed` runs at EOF, after the
  // last line was written. Its last lines are kept for failure reports
  // (tail(), TailLines).
  int add(int fd, StreamOptions options, std::function<void()> on_closed);

  // The last lines read from stream `id`, oldest first.
  std::string tail(int id) const;

  // Stream `id`, if it is read on the shared tick, waits on its own pipe
  // again: a worker's exit wakes its own streams, so that their end is seen
  // at once, not a tick later (a restart waits for it).
  void wake(int id);

  // The same for every stream: the group's stop, so that what every worker
  // printed before it is read now.
  void wake_all();

  // Stops reading every stream now: pending reads are cancelled and no
  // on_closed callback runs any more (their owner is going away).
  void close_all();

  // A stream that woke the agent twice within kBusyGap is read every kTick,
  // until kIdleTicks ticks in a row find nothing.
  static constexpr std::chrono::milliseconds kTick{40};
  // How long a part of a line waits for its rest before the console shows it.
  static constexpr std::chrono::milliseconds kPartialWait{100};
  static constexpr std::chrono::milliseconds kBusyGap{100};
  static constexpr int kIdleTicks = 3;

 private:
  struct Stream;
  struct Ticker;
  // Every stream waits for its pipe to be readable, then reads into this one
  // buffer (all run on the io_context's thread): no buffer per stream, which
  // was 32 KiB a worker.
  static constexpr size_t kReadBytes = 64 * 1024;
  boost::asio::io_context& io_;
  std::shared_ptr<std::vector<char>> buffer_;
  std::shared_ptr<Ticker> ticker_;  // null: kEveryWake
  std::vector<std::shared_ptr<Stream>> streams_;
};

}  // namespace ccrun
