// Expiry of finished jobs' keys (see job_janitor.h).
#include "job_janitor.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "store_util.h"

namespace ccrun::store {
namespace {

constexpr std::string_view kRoot = "ccrun/";

// "closed", or "round/<digits>/all_exited": a job's done markers, relative
// to its "ccrun/<run_id>/".
bool is_done_marker(std::string_view rest) {
  if (rest == "closed") return true;
  constexpr std::string_view kRound = "round/", kExited = "/all_exited";
  if (!rest.starts_with(kRound) || !rest.ends_with(kExited)) return false;
  std::string_view digits = rest.substr(kRound.size(), rest.size() - kRound.size() - kExited.size());
  return !digits.empty() &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

void JobJanitor::on_write(const std::string& key) {
  if (ttl_.count() == 0 || !std::string_view(key).starts_with(kRoot)) return;
  size_t slash = key.find('/', kRoot.size());
  if (slash == std::string::npos || slash == kRoot.size()) return;
  std::string_view rest = std::string_view(key).substr(slash + 1);
  bool marker = is_done_marker(rest);
  if (finished_.empty() && !marker) return;  // the common case: no string built
  std::string prefix = key.substr(0, slash + 1);
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

void JobJanitor::arm(Clock::time_point deadline) {
  armed_ = true;
  timer_.expires_at(deadline);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) sweep();
  });
}

void JobJanitor::sweep() {
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
