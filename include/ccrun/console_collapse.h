//===- ccrun/console_collapse.h - One line for what many ranks print -*- C++ -*-===//
//
// --collapse-output: a line that several ranks print identically within a
// short window reaches the console once, with their ranks compressed into
// its prefix ("[0-7]:UserWarning: ..."), instead of once per rank. Lines
// that differ keep their own ranks; a Python traceback is one unit (LogMux
// hands it over whole), so it stays whole, grouped by the ranks that printed
// it identically. Each rank's lines keep their order, a line is held at
// most `window` after the first rank printed it (less when every rank has),
// and the log files and failure reports never see this: they stay raw.
//
// How: entries in order of their first arrival; a rank's line joins the
// earliest open entry with the same text that holds nothing of that rank
// and comes after the rank's own pending entries (else it opens a new
// one). The head of the queue is printed once every rank joined it or its
// window ran out (an Asio timer), and so are the entries behind it that are
// due: printing in queue order keeps each rank's order.
//
// Each agent collapses its own node's ranks; on a host list the launching
// ccrun collapses every node's (their agents send it each unit framed,
// ccrun/console_frame.h), so its header is public.
//
//   ConsoleCollapser out(io, {1, 8, "[${rank}]:", "default"});
//   out.submit(3, 3, "UserWarning: ...");   // ... from 8 ranks: one line
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "log_mux.h"

namespace ccrun::agent {

// How many of a node's `workers` local ranks print on the console: all,
// or those of --local-ranks-filter (`filter`, non-empty) that it has. The
// collapse expects that many ranks (per node, summed on a host list).
size_t shown_local_ranks(size_t workers, const std::set<int>& filter);

struct CollapseOptions {
  int console_fd = 1;
  size_t expected = 1;          // the ranks that print here: an entry all of them joined is due
  std::string prefix_template;  // LogSpec::line_prefix_template ("" = no prefix)
  std::string role;
  std::chrono::milliseconds window{500};
};

class ConsoleCollapser final : public LineSink {
 public:
  ConsoleCollapser(boost::asio::io_context& io, CollapseOptions options);
  ~ConsoleCollapser() override;  // prints what is pending
  ConsoleCollapser(const ConsoleCollapser&) = delete;  // owns a timer
  ConsoleCollapser& operator=(const ConsoleCollapser&) = delete;

  // One line (or a traceback: lines joined by '\n') of `rank`, without its
  // final '\n' and without a prefix.
  void submit(int rank, int local_rank, std::string_view text) override;

  // Prints every pending entry now, in order.
  void flush_all() override;

  // Lines written to the console so far (each entry counts once).
  [[nodiscard]] uint64_t written() const { return written_; }

 private:
  struct Entry {
    uint64_t seq = 0;
    std::string text;
    std::vector<int> ranks, local_ranks;
    std::chrono::steady_clock::time_point first;
    Entry* next_same = nullptr;  // the next open entry of the same text
  };
  // The open entries of one text, oldest first (a chain through next_same):
  // the oldest is always the first of them to be printed.
  struct Chain {
    Entry* oldest = nullptr;
    Entry* newest = nullptr;
  };
  // Heterogeneous lookup: a line is looked up as it lies in the read buffer.
  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  using OpenMap = std::unordered_map<std::string_view, Chain, TextHash, std::equal_to<>>;
  Entry* join(const Chain& chain, int rank, uint64_t after) const;
  Entry* open_entry(std::string_view text, OpenMap::iterator chain);
  std::unique_ptr<Entry> new_entry(std::string_view text);
  void retire(std::unique_ptr<Entry> e);
  void print(const Entry& e);  // into out_
  void flush_due();
  void arm();

  CollapseOptions o_;
  boost::asio::steady_timer timer_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::deque<std::unique_ptr<Entry>> queue_;  // pending, in order of first arrival
  // By text; a key views its chain's oldest entry's text.
  OpenMap open_;
  std::unordered_map<int, uint64_t> last_seq_;  // rank -> seq of its newest entry
  std::vector<std::unique_ptr<Entry>> spare_;  // printed entries, reused: no allocation a line
  std::map<std::string, std::string, std::less<>> prefix_values_;  // the prefix's macros
  uint64_t next_seq_ = 1;
  uint64_t written_ = 0;
  BatchedWriter out_;  // the entries printed by one read's lines, in one write
};

}  // namespace ccrun::agent
