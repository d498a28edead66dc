// Reading the workers' start-up blocks until every rank has stepped (see startup_watch.h).
#include "startup_watch.h"

#include <algorithm>

namespace ccrun::agent {

using std::chrono::milliseconds;

StartupWatch::StartupWatch(boost::asio::io_context& io, Read read, Done done)
    : timer_(io), read_(std::move(read)), done_(std::move(done)) {
  arm();
}

milliseconds StartupWatch::interval(milliseconds elapsed) {
  if (elapsed < milliseconds(2'000)) return milliseconds(10);
  if (elapsed < milliseconds(60'000)) return milliseconds(100);
  return milliseconds(1'000);
}

void StartupWatch::arm() {
  auto elapsed = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - started_);
  timer_.expires_after(interval(elapsed));
  timer_.async_wait([this, alive = alive_](boost::system::error_code ec) {
    if (ec || !*alive) return;  // cancelled, or queued before the watch went: `this` is gone
    if (!check()) arm();
  });
}

bool StartupWatch::check(const Past& past) {
  if (!done_) return true;
  std::vector<StartupTimeline> now = read_();
  bool all = !now.empty() &&
             std::all_of(now.begin(), now.end(), [](const StartupTimeline& t) { return t.done(); });
  if (!all && !(past && !now.empty() && past(now))) return false;
  auto done = std::move(done_);
  done_ = nullptr;
  done(std::move(now));
  return true;
}

void StartupWatch::finish(const Past& past) {
  timer_.cancel();
  check(past);
  done_ = nullptr;
}

}  // namespace ccrun::agent
