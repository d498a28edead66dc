// A round's liveness and end, watched from one thread (see round_watch.h).
#include "round_watch.h"
#include "round_end.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>

#include "ccrun/error.h"

namespace ccrun::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;

bool transient(const Error& e) {
  return dynamic_cast<const ConnectionError*>(&e) || dynamic_cast<const TimeoutError*>(&e);
}

constexpr int64_t kNever = INT64_MAX;

}  // namespace

BeatSchedule::BeatSchedule(std::chrono::milliseconds interval, int node_rank, int watch)
    : interval_ms_(std::max<int64_t>(interval.count(), 1)) {
  int64_t spread = spread_ms(interval);
  write_phase_ = int64_t(node_rank) * spread % interval_ms_;
  read_phase_ = (int64_t(watch) * spread + spread) % interval_ms_;
}

int64_t BeatSchedule::spread_ms(std::chrono::milliseconds interval) {
  return std::max<int64_t>(std::min<int64_t>(50, interval.count() / 4), 1);
}

int64_t BeatSchedule::next(int64_t phase, int64_t not_before) const {
  int64_t t = not_before - not_before % interval_ms_ + phase;
  return t < not_before ? t + interval_ms_ : t;
}

int64_t BeatSchedule::next_write(int64_t not_before) const { return next(write_phase_, not_before); }
int64_t BeatSchedule::next_read(int64_t not_before) const { return next(read_phase_, not_before); }

RoundWatch::RoundWatch(RoundWatchOptions o, StoreConnector connect, RoundWatchHooks hooks)
    : o_(std::move(o)),
      connect_(std::move(connect)),
      hooks_(std::move(hooks)),
      keys_(o_.run_id),
      schedule_(o_.interval, o_.node_rank, o_.watch) {
  thread_ = std::thread([this] { run(); });
}

void RoundWatch::stop() {
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();
  } else {
    thread_.join();
  }
}

bool RoundWatch::pause(std::chrono::milliseconds d) {
  std::unique_lock lock(stop_mu_);
  return !stop_cv_.wait_for(lock, d, [this] { return stop_.load(); });
}

void RoundWatch::deliver(const RoundEvent& e) {
  if (!stop_) hooks_.on_event(e);
}

// A connection of its own: the watch parks in a wait that must not queue
// behind the agent's calls. nullptr when stopping or already reported lost.
std::shared_ptr<store::Store> RoundWatch::connect() {
  auto window = o_.interval * o_.max_attempt;
  auto since = Clock::now();
  while (!stop_) {
    try {
      return connect_();
    } catch (const InterruptedError&) {
      return nullptr;
    } catch (const Error& e) {
      if (!dynamic_cast<const ConnectionError*>(&e) || Clock::now() - since >= window) {
        deliver({RoundEndKind::kStoreLost, -1, e.what(), {}});
        return nullptr;
      }
    }
    if (!pause(o_.interval)) return nullptr;
  }
  return nullptr;
}

void RoundWatch::run() {
  auto conn = connect();
  if (!conn) return;
  auto window = o_.interval * o_.max_attempt;
  auto lost_since = Clock::time_point{};
  while (!stop_) {
    try {
      watch_round(*conn);
      return;
    } catch (const InterruptedError&) {
      return;  // the agent is stopping
    } catch (const Error& e) {
      // A store that refuses the connection or does not answer in time
      // (stopped, hung): lost once that lasts the keep-alive window.
      if (!transient(e)) {
        deliver({RoundEndKind::kClosed, -1, e.what(), {}});
        return;
      }
      if (lost_since == Clock::time_point{}) lost_since = Clock::now();
      if (Clock::now() - lost_since >= window) {
        deliver({RoundEndKind::kStoreLost, -1, e.what(), {}});
        return;
      }
      if (!pause(o_.interval)) return;
    }
  }
}

// Beats on the schedule until the round ends (delivered) or the watch stops.
// A store error leaves it to run(), which comes back here while the store
// is not lost (the first write then comes at once again).
void RoundWatch::watch_round(store::Store& s) {
  int64_t half = o_.interval.count() / 2;
  write_beat(s);
  int64_t next_write = schedule_.next_write(wall_clock_ms() + half);
  bool watching = o_.watch != o_.node_rank;
  // Each read checks the watched node's latest write slot, from the first
  // slot on; its first write (at once, like this node's) counts as its beat 1.
  int64_t next_read = watching ? schedule_.next_read(wall_clock_ms()) : kNever;
  int64_t next_publish = kNever;  // watched: the next status for the reader
  while (!stop_) {
    int64_t due = std::min({next_write, next_read, next_publish});
    Woken woken = wait_for_end(s, due);
    if (woken == Woken::kEnd || stop_) return;  // stopped: not one beat more
    if (woken == Woken::kWatch) {
      next_publish = wall_clock_ms();  // the reader's first frame wants it now
      continue;
    }
    // The wait's timeout may end a little early (the server's timer): the
    // slot is due, not one more wait of a millisecond.
    int64_t now = std::max(wall_clock_ms(), due);
    if (now >= next_read) {
      read_watched(s);
      next_read = schedule_.next_read(now + half);
    }
    if (now >= next_write) {
      write_beat(s);
      next_write = schedule_.next_write(now + half);
    }
    if (now >= next_publish) next_publish = publish_watched(s, now);
  }
}

// Waits on the round's wake key until `until_ms` (wall clock): kEnd once the
// round's end came and was delivered, kWatch when a reader started watching.
// The generation is read before the end is checked (ccrun/watch_lease.h).
RoundWatch::Woken RoundWatch::wait_for_end(store::Store& s, int64_t until_ms) {
  int64_t left = until_ms - wall_clock_ms();
  if (left < 1) return Woken::kDue;
  try {
    s.wait({keys_.wake(o_.round, wake_gen_)}, std::chrono::milliseconds(left));
  } catch (const TimeoutError&) {
    return Woken::kDue;
  }
  wake_gen_ = s.add(keys_.watchers(o_.round), 0);
  if (s.check({keys_.end(o_.round)})) {
    RoundEnd end = RoundEnd::from_json(s.get(keys_.end(o_.round)));
    deliver({end.kind, end.node, end.detail, end.failure(), end.stop_signal});
    return Woken::kEnd;
  }
  lease_.observe(s.get(keys_.watch(o_.round)), wall_clock_ms());
  return Woken::kWatch;
}

// While a reader's lease lives: this node's status now, and the lease read
// again. The next publish's time, or kNever once the lease expired.
int64_t RoundWatch::publish_watched(store::Store& s, int64_t now) {
  if (!lease_.live(now)) return kNever;
  s.set(keys_.status(o_.round, o_.node_rank), hooks_.status());
  lease_.observe(s.get(keys_.watch(o_.round)), now);
  return lease_.live(now) ? now + lease_.publish_every_ms(o_.interval.count()) : kNever;
}

void RoundWatch::write_beat(store::Store& s) {
  // Only this node writes its counter: a set (on etcd a plain put), read
  // as a counter by the node that watches it.
  std::vector<std::string> keys{keys_.heartbeat(o_.round, o_.node_rank),
                                keys_.status(o_.round, o_.node_rank)};
  std::vector<std::string> values{std::to_string(++beats_sent_), hooks_.status()};
  bool done = hooks_.done();
  if (done) {
    keys.push_back(keys_.done(o_.round, o_.node_rank));
    values.push_back("1");
  }
  s.multi_set(keys, values);
  if (done && o_.node_rank == 0) check_all_done(s);
}

// Reads come `spread` after each of the watched node's write slots, so each
// read asks "did it write in its latest slot?": a counter that did not move
// (or is still 0: it never wrote) is one missed slot, and
// keep_alive_max_attempt missed slots in a row, the window, make it dead.
// It is declared then, `spread` after its last slot: within the window plus
// `spread` of its last beat.
void RoundWatch::read_watched(store::Store& s) {
  int64_t v = s.add(keys_.heartbeat(o_.round, o_.watch), 0);
  if (++reads_ > 2 && v < last_ && !said_lost_) {
    // Counters only grow: the store lost its keys (a restarted
    // ccrun-rendezvous starts empty). Each beat tells it this node's whole
    // state again, so nothing more is needed than saying so.
    spdlog::warn("rendezvous '{}': the store lost round {} (was it restarted?); each node tells "
                 "it its state again", o_.run_id, o_.round);
    said_lost_ = true;
    wake_gen_ = 0;  // the watch sessions counted again from none
  }
  stalls_ = (v == last_ || v == 0) ? stalls_ + 1 : 0;
  last_ = v;
  if (stalls_ < o_.max_attempt) return;
  RoundEnd dead{RoundEndKind::kNodeDead, o_.watch,
                "node " + std::to_string(o_.watch) + " (" + o_.watch_addr +
                    ") sent no heartbeat for " + format_duration(o_.interval * o_.max_attempt),
                o_.num_nodes - 1};
  // The survivors (and the spares admitted in the dead node's place) are the
  // next round's expected nodes, set before any of them can rejoin: they
  // first stop their workers (round_end.h).
  end_round(s, keys_, o_.round, dead, o_.max_nodes);
}

void RoundWatch::check_all_done(store::Store& s) {
  std::vector<std::string> done;
  for (int i = 0; i < o_.num_nodes; ++i) done.push_back(keys_.done(o_.round, i));
  if (s.check(done)) {
    end_round(s, keys_, o_.round, RoundEnd{RoundEndKind::kAllDone, -1, "", o_.num_nodes},
              o_.max_nodes);
  }
}

}  // namespace ccrun::rendezvous
