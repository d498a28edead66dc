//===- round_watch.h - A round's liveness, one counter per node -*- C++ -*-===//
//
// While a round runs, each node's RoundWatch, on a thread and a store
// connection of its own, every keep_alive_interval:
//   1. reads the heartbeat counter of the one node it watches (the previous
//      node rank; round_plan.h): one small read. A counter that did not move
//      for keep_alive_max_attempt intervals ends the round (kNodeDead). The
//      beats keep a schedule on the wall clock (BeatSchedule): node k writes
//      at k x spread past each interval's start, and reads node k - 1's
//      counter `spread` after that one wrote, so a death is seen within the
//      window plus `spread`, not plus a whole interval;
//   2. writes its own counter and its status for `ccrun status` (and, at the
//      exit barrier, its done mark) in one multi_set: a restarted
//      ccrun-rendezvous, which starts empty, is told again at the next beat;
//   3. on node 0 at the exit barrier only: checks every node's done mark, so
//      a finished counter that a restarted store lost cannot hang the
//      barrier;
//   4. waits on the round's wake key until the next beat: any end (a failure,
//      a death, the barrier) sets it and reaches the watch at once, and so
//      does a reader that starts watching the job (ccrun/watch_lease.h);
//   5. while a reader's lease lives: publishes this node's status at the
//      reader's refresh rate, and reads the lease.
// So an unwatched job's store serves three requests per node per interval
// and O(1) bytes each, whatever N: a death is decided by the one node that
// watches it, not by every node reading every counter. A store that does
// not answer for the whole keep-alive window is lost (kStoreLost).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ccrun/job_keys.h"
#include "ccrun/rendezvous.h"
#include "ccrun/watch_lease.h"

namespace ccrun::rendezvous {

struct RoundWatchOptions {
  std::string run_id;
  int round = 0;
  int node_rank = 0;
  int num_nodes = 1;
  int max_nodes = 1;           // --nnodes' maximum: how many spares a dead node's end admits
  int watch = 0;               // the node rank it watches (itself when alone)
  std::string watch_addr;      // that node's address, for the message
  std::chrono::milliseconds interval{5'000};
  int max_attempt = 3;
};

// When a node writes its beat and reads the counter it watches, as times
// on the wall clock (ms since the epoch) modulo the interval: node k writes
// at phase k x spread, and reads its watched node's counter `spread` after
// that node's phase. Node k - 1 writes `spread` before node k, so for every
// node but 0 the read and the write fall at the same moment. Clock skew
// between hosts only delays a detection (a read that comes before the write
// sees it one interval later); it never declares a live node dead: stalls
// are still counted in whole intervals.
class BeatSchedule {
 public:
  BeatSchedule(std::chrono::milliseconds interval, int node_rank, int watch);
  // The first write (read) time at or after `not_before`.
  [[nodiscard]] int64_t next_write(int64_t not_before) const;
  [[nodiscard]] int64_t next_read(int64_t not_before) const;
  // The offset between consecutive node ranks: min(50 ms, interval / 4).
  [[nodiscard]] static int64_t spread_ms(std::chrono::milliseconds interval);

 private:
  [[nodiscard]] int64_t next(int64_t phase, int64_t not_before) const;
  int64_t interval_ms_, write_phase_, read_phase_;
};

struct RoundWatchHooks {
  std::function<std::string()> status;  // this node's status record (JSON), each beat
  std::function<bool()> done;           // has this node marked done?
  std::function<void(const RoundEvent&)> on_event;  // once, from the watch's thread
};

class RoundWatch {
 public:
  // Starts watching at once, on a thread of its own.
  RoundWatch(RoundWatchOptions o, StoreConnector connect, RoundWatchHooks hooks);
  ~RoundWatch() { stop(); }
  RoundWatch(const RoundWatch&) = delete;  // owns a thread
  RoundWatch& operator=(const RoundWatch&) = delete;

  // Stops the thread and returns when it has stopped (also from on_event).
  void stop();

 private:
  void run();
  std::shared_ptr<store::Store> connect();
  void watch_round(store::Store& s);
  enum class Woken { kDue, kEnd, kWatch };
  Woken wait_for_end(store::Store& s, int64_t until_ms);
  int64_t publish_watched(store::Store& s, int64_t now);  // the next publish, or kNever
  void write_beat(store::Store& s);
  void read_watched(store::Store& s);
  void check_all_done(store::Store& s);
  bool pause(std::chrono::milliseconds d);  // false: stopping
  void deliver(const RoundEvent& e);

  RoundWatchOptions o_;
  StoreConnector connect_;
  RoundWatchHooks hooks_;
  JobKeys keys_;
  BeatSchedule schedule_;
  int reads_ = 0;            // reads of the watched counter
  int64_t beats_sent_ = 0;   // this node's counter (each try counts)
  int64_t last_ = 1;         // the watched counter as last read
  int stalls_ = 0;           // intervals it did not move
  int64_t wake_gen_ = 0;     // the wake key it waits on (ccrun/watch_lease.h)
  LeaseTracker lease_;       // a reader's lease, once one woke it
  bool said_lost_ = false;   // the store's loss of the round was said
  std::atomic<bool> stop_{false};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::thread thread_;
};

}  // namespace ccrun::rendezvous
