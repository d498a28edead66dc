//===- store_tasks.h - Store calls off the agent's event loop ---*- C++ -*-===//
//
// Store calls made while the workers run (the exit-barrier mark, a restart
// request) may block for as long as the store takes to answer, so each runs
// on a thread of its own and the io_context never waits on the store. A
// failure is posted back to the io_context; join() waits for every call
// (the agent triggers the shared StoreInterrupt first, so none lingers).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace ccrun::agent {

class StoreTasks {
 public:
  explicit StoreTasks(boost::asio::io_context& io) : io_(io) {}
  ~StoreTasks() { join(); }
  StoreTasks(const StoreTasks&) = delete;
  StoreTasks& operator=(const StoreTasks&) = delete;

  // Runs `call` on a new thread; `on_error` runs on the io_context with the
  // message when it throws (InterruptedError is not an error: the agent
  // interrupted it on purpose).
  void run(std::function<void()> call, std::function<void(const std::string&)> on_error);

  // Waits for every call started so far.
  void join();

 private:
  struct Task {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done = std::make_shared<std::atomic<bool>>(false);
  };
  boost::asio::io_context& io_;
  std::mutex mu_;           // run() on the loop, join() off it
  std::list<Task> tasks_;   // guarded by mu_; finished ones are joined by the next run()
};

}  // namespace ccrun::agent
