// A reader's lease on a job's live status (see ccrun/watch_lease.h).
#include "ccrun/watch_lease.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <vector>

namespace ccrun {

using nlohmann::json;

std::string WatchLease::to_json() const {
  return json{{"refresh_ms", refresh_ms}, {"reader", reader}, {"seq", seq}}.dump();
}

WatchLease WatchLease::from_json(const std::string& text) {
  WatchLease l;
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return l;
  try {
    l.refresh_ms = std::max<int64_t>(j.value("refresh_ms", int64_t{1000}), 1);
    l.reader = j.value("reader", "");
    l.seq = j.value("seq", int64_t{0});
  } catch (const json::exception&) {
  }
  return l;
}

int64_t lease_expiry_ms(int64_t refresh_ms) { return std::max<int64_t>(3 * refresh_ms, 3'000); }

void LeaseTracker::observe(const std::string& text, int64_t now_ms) {
  if (text.empty() || text == last_) return;
  last_ = text;
  changed_ms_ = now_ms;
  refresh_ms_ = WatchLease::from_json(text).refresh_ms;
}

bool LeaseTracker::live(int64_t now_ms) const {
  return !last_.empty() && now_ms - changed_ms_ <= lease_expiry_ms(refresh_ms_);
}

int64_t LeaseTracker::publish_every_ms(int64_t beat_ms) const {
  return std::clamp<int64_t>(refresh_ms_, kMinWatchedPublish.count(),
                             std::max<int64_t>(beat_ms, kMinWatchedPublish.count()));
}

WatchLeaseWriter::WatchLeaseWriter(const std::string& run_id, std::string reader,
                                   std::chrono::milliseconds refresh)
    : keys_(run_id) {
  lease_.reader = std::move(reader);
  lease_.refresh_ms = std::max<int64_t>(refresh.count(), 1);
}

void WatchLeaseWriter::renew(store::Store& s, int round, int64_t now_ms) {
  if (round < 0) return;
  bool lapsed = now_ms - renewed_ms_ > lease_expiry_ms(lease_.refresh_ms) / 2;
  ++lease_.seq;
  s.set(keys_.watch(round), lease_.to_json());  // before the wake: a woken node reads it
  if (round != round_ || lapsed) {
    int64_t n = s.add(keys_.watchers(round), 1);
    s.set(keys_.wake(round, n - 1), "1");
    round_ = round;
  }
  renewed_ms_ = now_ms;
}

void wake_round_watches(store::Store& s, const JobKeys& keys, int r) {
  int64_t w = s.add(keys.watchers(r), 0);
  std::vector<std::string> ks, vs;
  for (int64_t g = 0; g <= w; ++g) {
    ks.push_back(keys.wake(r, g));
    vs.emplace_back("1");
  }
  s.multi_set(ks, vs);
}

}  // namespace ccrun
