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
#include <list>
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
  boost::asio::io_context& io_;
  std::list<std::thread> threads_;
};

}  // namespace ccrun::agent
