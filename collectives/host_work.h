//===- host_work.h - The Work of a host backend's operation -----*- C++ -*-===//
//
// The completion of one operation run by a backend's own thread (the Gloo
// group's worker, the MPI group's engine): that thread calls finish() once,
// with the operation's error or null; any thread waits (Work in
// include/ccrun/collectives.h).
//
//   auto work = std::make_shared<HostWork>();
//   queue(..., work);              // the backend's thread: work->finish(nullptr)
//   work->wait();                  // the caller: blocks, rethrows the error
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>

#include "ccrun/collectives.h"

namespace ccrun::collectives {

class HostWork : public Work {
 public:
  void wait() override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool wait_for(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return done_; })) return false;
    if (error_) std::rethrow_exception(error_);
    return true;
  }
  bool is_completed() override {
    std::lock_guard lock(mu_);
    return done_;
  }
  // Marks the operation done (once): null when it succeeded.
  void finish(std::exception_ptr error) {
    {
      std::lock_guard lock(mu_);
      done_ = true;
      error_ = error;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;             // guarded by mu_
  std::exception_ptr error_;      // guarded by mu_
};

}  // namespace ccrun::collectives
