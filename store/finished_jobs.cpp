// Expiry of finished jobs' keys (see finished_jobs.h).
#include "finished_jobs.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "ccrun/job_keys.h"
#include "store_util.h"

namespace ccrun::store {

void FinishedJobExpiry::on_write(const std::string& key) {
  if (ttl_.count() == 0) return;
  auto split = JobKeys::split(key);
  if (!split) return;
  bool marker = split->done_marker;
  if (finished_.empty() && !marker) return;  // the common case: no string built
  std::string prefix(split->job);
  auto it = finished_.find(prefix);
  auto now = Clock::now();
  if (it == finished_.end()) {
    if (!marker) return;
    it = finished_.emplace(std::move(prefix), Finished{key, now}).first;
  } else {
    it->second.last_write = now;  // activity postpones the expiry
    if (marker) it->second.marker = key;
  }
  if (!armed_) arm(now + ttl_);
}

void FinishedJobExpiry::arm(Clock::time_point deadline) {
  armed_ = true;
  timer_.expires_at(deadline);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) sweep();
  });
}

void FinishedJobExpiry::sweep() {
  armed_ = false;
  auto now = Clock::now();
  auto next = Clock::time_point::max();
  for (auto it = finished_.begin(); it != finished_.end();) {
    auto deadline = it->second.last_write + ttl_;
    if (deadline > now) {
      next = std::min(next, deadline);
      ++it;
      continue;
    }
    // Deleted meanwhile (DELETE_PREFIX, DELETE_KEY): nothing to expire.
    if (table_.find(it->second.marker)) {
      size_t n = table_.erase_prefix(it->first);
      spdlog::info("store: deleted the {} key(s) of finished job \"{}\" ({} exists, nothing "
                   "written for {})", n, it->first, it->second.marker, format_duration(ttl_));
    }
    it = finished_.erase(it);
  }
  if (next != Clock::time_point::max()) arm(next);
}

}  // namespace ccrun::store
