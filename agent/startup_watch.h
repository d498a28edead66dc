//===- startup_watch.h - Waits for every worker's first step ----*- C++ -*-===//
//
// After an attempt's workers start, the agent wants to say, once, how long
// they took to train again (startup_timeline.h). Nothing signals a first
// step: it is a store into the worker's progress record. So this reads the
// records' start-up blocks on an Asio timer, often while start-up is young
// and less often as it drags on (every 10 ms for the first 2 s, every 100 ms
// up to a minute, then every second), and stops at the first time every
// rank has stepped, or when destroyed with the attempt. A read is a few
// loads per worker, no system call.
//
//   StartupWatch w(io, [&] { return monitor.timelines(); },
//                  [&](std::vector<StartupTimeline> t) { say(startup_line(...)); });
//
//===----------------------------------------------------------------------===//
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "ccrun/startup_timeline.h"

namespace ccrun::agent {

class StartupWatch {
 public:
  using Read = std::function<std::vector<StartupTimeline>()>;
  using Done = std::function<void(std::vector<StartupTimeline>)>;
  using Past = std::function<bool(const std::vector<StartupTimeline>&)>;

  // Starts watching now; `done` runs on `io` once, when every timeline
  // `read` returns has its first step.
  StartupWatch(boost::asio::io_context& io, Read read, Done done);
  // `done` never runs after this: a handler already queued (its timer had
  // expired, so cancel() cannot stop it) finds the watch gone and returns.
  ~StartupWatch() {
    *alive_ = false;
    timer_.cancel();
  }
  StartupWatch(const StartupWatch&) = delete;  // its timer's handler holds `this`
  StartupWatch& operator=(const StartupWatch&) = delete;

  // One last read, at the end of the attempt: ranks that stepped and exited
  // between two reads still get their line; and when not every rank
  // stepped but `past` says every one is past its start-up all the same (a
  // program without steps), the line ends at the phases they reached. Then
  // no more reads.
  void finish(const Past& past = nullptr);

  // How long to wait before the next read, `elapsed` after the start.
  static std::chrono::milliseconds interval(std::chrono::milliseconds elapsed);

 private:
  void arm();
  // Reads the timelines; `done` when every rank stepped, or `past` says
  // they are all past their start-up (once). True then.
  bool check(const Past& past = nullptr);
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  boost::asio::steady_timer timer_;
  Read read_;
  Done done_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace ccrun::agent
