//===- ccrun/watch_lease.h - A reader's lease on a job's live status -*- C++ -*-===//
//
// Every node of a job publishes its status (ccrun/job_state.h's NodeStatus,
// its ranks' progress) with its heartbeat, once per keep_alive_interval
// (5 s). A reader that shows the job live (`ccrun top`) takes a lease: while
// it renews it, every node publishes at the reader's refresh rate; when it
// stops (the reader quit, was killed or stopped), the lease expires and the
// nodes go back to the heartbeat's rate. An unwatched job costs nothing
// more: a node's round watch waits on a wake key where it waited on the
// round's end key (one wait either way), and that key is set by a reader
// that starts watching and by the round's end.
//
// The protocol, in round R (the keys are in ccrun/job_keys.h):
//   reader  set watch = lease; n = add(watchers, 1); set wake/<n - 1>;
//           then at every refresh: set watch = the lease, its seq + 1
//   node    waits on wake/<g> (g = 0 when the round starts) until its next
//           beat; woken, g = add(watchers, 0), then check(end): the round's
//           end, or a watch: it publishes its status and reads the lease at
//           the lease's refresh rate for as long as the lease changes
//   end     compare_set(end), then W = add(watchers, 0); set wake/0..W
// No node misses the end: it reads g before it checks the end, so an end
// written after that check reads W >= g and sets wake/<g> itself.
//
//   WatchLeaseWriter lease(run_id, "host:pid", 1s);    // the reader
//   lease.renew(store, job.round, wall_clock_ms());     // at every refresh
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "ccrun/job_keys.h"
#include "ccrun/store.h"

namespace ccrun {

// round/<R>/watch: JSON {refresh_ms, reader, seq}.
struct WatchLease {
  int64_t refresh_ms = 1000;  // the reader's refresh interval
  std::string reader;         // who reads ("host:pid"), for a person looking at the store
  int64_t seq = 0;            // grows at every renewal: a value that changes is a live lease

  [[nodiscard]] std::string to_json() const;
  [[nodiscard]] static WatchLease from_json(const std::string& text);  // tolerant
};

// A node publishes a watched status at most this often: its ranks' progress
// is sampled once a second (the hang monitor's sample), so a faster reader
// redraws the same sample.
inline constexpr std::chrono::milliseconds kMinWatchedPublish{1'000};

// A lease that did not change for this long has expired: three of its
// refreshes, and at least 3 s.
[[nodiscard]] int64_t lease_expiry_ms(int64_t refresh_ms);

// A node's view of the lease: whether it is watched, and how often it then
// publishes. Pure: times are the caller's (ms).
class LeaseTracker {
 public:
  // The lease's value as read at `now_ms` ("" for none).
  void observe(const std::string& text, int64_t now_ms);
  [[nodiscard]] bool live(int64_t now_ms) const;
  // The watched publishing interval: the reader's refresh, between
  // kMinWatchedPublish and the heartbeat's `beat_ms`.
  [[nodiscard]] int64_t publish_every_ms(int64_t beat_ms) const;

 private:
  std::string last_;
  int64_t changed_ms_ = 0;
  int64_t refresh_ms_ = 1000;
};

// The reader's side: takes the lease on the job's current round and keeps
// it. A new round (a restart), or a gap in the renewals longer than half the
// expiry (the reader was stopped, or its store calls were slow), starts a
// new watch session, which wakes the nodes again.
class WatchLeaseWriter {
 public:
  WatchLeaseWriter(const std::string& run_id, std::string reader, std::chrono::milliseconds refresh);
  // Renews the lease on round `round` at `now_ms` (wall clock); nothing for
  // a round < 0 (the job is forming or over).
  void renew(store::Store& s, int round, int64_t now_ms);

 private:
  JobKeys keys_;
  WatchLease lease_;
  int round_ = -1;          // the round of the session
  int64_t renewed_ms_ = 0;  // the last renewal
};

// The round's end: sets every wake key up to the sessions started in round
// r, so that every node's round watch wakes and reads the end.
void wake_round_watches(store::Store& s, const JobKeys& keys, int r);

}  // namespace ccrun
