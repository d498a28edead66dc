//===- job_janitor.h - Expiry of finished jobs' keys in the store -*- C++ -*-//
//
// A standalone store (ccrun-rendezvous) serves job after job; without this
// their keys stay until it stops. The janitor watches the writes of ccrun's
// key layout (include/ccrun/job_keys.h: every key of a job under
// "ccrun/<run_id>/") for a job's done markers:
//
//   ccrun/<run_id>/closed                  the job failed for good
//   ccrun/<run_id>/round/<R>/all_exited    every node left round R (success)
//
// Once a marker exists and nothing has been written under "ccrun/<run_id>/"
// for `ttl`, the job's keys and queues are deleted, provided the marker is
// still there. A live job writes heartbeats every few seconds, so it never
// expires; a job relaunched under the same run id postpones the deletion by
// writing. One timer, armed for the earliest deadline: no scans between.
// Used from the server's one thread only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <utility>  // boost 1.74 asio uses std::exchange without it
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <string>
#include <string_view>
#include <unordered_map>

#include "key_table.h"

namespace ccrun::store {

class JobJanitor {
 public:
  // ttl 0: the janitor does nothing.
  JobJanitor(boost::asio::io_context& io, KeyTable& table, std::chrono::milliseconds ttl)
      : timer_(io), table_(table), ttl_(ttl) {}
  JobJanitor(const JobJanitor&) = delete;  // owns a timer
  JobJanitor& operator=(const JobJanitor&) = delete;

  // Called after every write of `key` (set, add, append, queue push).
  void on_write(const std::string& key);

  // Finished jobs waiting for their expiry.
  size_t pending() const { return finished_.size(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Finished {
    std::string marker;           // the done marker seen last
    Clock::time_point last_write;  // under the job's prefix
  };

  void arm(Clock::time_point deadline);
  void sweep();

  boost::asio::steady_timer timer_;
  KeyTable& table_;
  std::chrono::milliseconds ttl_;
  bool armed_ = false;
  std::unordered_map<std::string, Finished> finished_;  // "ccrun/<id>/" -> ...
};

}  // namespace ccrun::store
