//===- log_limiter.h - Rate limit for log lines clients can cause -*- C++ -*-//
//
// A hostile or broken client can make the store log a line per connection
// (bad input, a wrong token, a refused connection): thousands a second. A
// `LogLimiter` lets at most `per_second` such lines through in any second
// and reports what it held back once that second is over:
//
//   if (ctx.bad_input_log.allow()) spdlog::warn("store: closing ...");
//   ...
//   [warn] store: 4711 more lines like the above were suppressed in the last second
//
// Used from the server's one thread only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <utility>  // boost 1.74 asio uses std::exchange without it
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>

namespace ccrun::store {

class LogLimiter {
 public:
  explicit LogLimiter(boost::asio::io_context& io, size_t per_second = 10)
      : timer_(io), per_second_(per_second) {}
  LogLimiter(const LogLimiter&) = delete;  // owns a timer
  LogLimiter& operator=(const LogLimiter&) = delete;

  // True when one more line may be logged now; false counts it as
  // suppressed (a summary line follows at the end of the second).
  [[nodiscard]] bool allow();

  // Lines suppressed since the last summary.
  size_t suppressed() const { return suppressed_; }

 private:
  void report();

  boost::asio::steady_timer timer_;
  size_t per_second_;
  std::chrono::steady_clock::time_point window_start_{};
  size_t lines_ = 0;       // lines let through in this window
  size_t suppressed_ = 0;  // lines held back since the last summary
};

}  // namespace ccrun::store
