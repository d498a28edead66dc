// Rate limit for the log lines clients can cause (see log_limiter.h).
#include "log_limiter.h"

#include <spdlog/spdlog.h>

namespace ccrun::store {

bool LogLimiter::allow() {
  auto now = std::chrono::steady_clock::now();
  if (now - window_start_ >= std::chrono::seconds(1)) {
    window_start_ = now;
    lines_ = 0;
  }
  if (lines_ < per_second_) {
    ++lines_;
    return true;
  }
  if (suppressed_++ == 0) {
    timer_.expires_at(window_start_ + std::chrono::seconds(1));
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) report();
    });
  }
  return false;
}

void LogLimiter::report() {
  if (suppressed_ == 0) return;
  spdlog::warn("store: {} more line(s) like the above were suppressed in the last "
               "second (at most {} a second are logged)", suppressed_, per_second_);
  suppressed_ = 0;
}

}  // namespace ccrun::store
