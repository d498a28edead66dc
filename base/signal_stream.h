//===- signal_stream.h - Stop signals as events on an io_context -*- C++ -*-===//
//
// The agent and the ssh fan-out react to SIGINT, SIGTERM and the user's
// --signals-to-handle on their io_context. The signals are blocked in every
// thread (from load on: ccrun/stop_signals.h) and read from a signalfd, so a
// signal that came before the loop ran, even before main, is read as soon
// as it runs; no handler runs at an arbitrary point, and no thread of ours
// is ever interrupted by one.
//
//   SignalStream signals(io, {SIGINT, SIGTERM});
//   signals.async_wait([](int signo) { ... });   // one signal per wait
//
//===----------------------------------------------------------------------===//
#pragma once

#include <sys/signalfd.h>

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <functional>
#include <vector>

namespace ccrun {

class SignalStream {
 public:
  // Blocks `signals` in the calling thread (call before starting threads:
  // they inherit the mask) and releases the load-time stop signals that are
  // not among them. Throws Error when no signalfd can be made.
  SignalStream(boost::asio::io_context& io, const std::vector<int>& signals);
  SignalStream(const SignalStream&) = delete;  // owns the descriptor
  SignalStream& operator=(const SignalStream&) = delete;

  // Calls `handler(signo)` on the io_context for the next signal, pending
  // ones first. One wait at a time; cancel() drops it without a call.
  void async_wait(std::function<void(int)> handler);
  void cancel();

 private:
  boost::asio::posix::stream_descriptor fd_;
  signalfd_siginfo info_{};
};

}  // namespace ccrun
