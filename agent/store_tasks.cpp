// StoreTasks: store calls on threads of their own (see store_tasks.h).
#include "store_tasks.h"

#include <boost/asio/post.hpp>
#include <exception>

#include "ccrun/error.h"

namespace ccrun::agent {

void StoreTasks::run(std::function<void()> call,
                     std::function<void(const std::string&)> on_error) {
  std::lock_guard<std::mutex> lock(mu_);
  // Calls made every second (the progress read of a multi-node job) would
  // otherwise keep a finished thread each until the attempt ends.
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = tasks_.erase(it);
    } else {
      ++it;
    }
  }
  Task& task = tasks_.emplace_back();
  task.thread = std::thread([this, done = task.done, call = std::move(call),
                             on_error = std::move(on_error)] {
    try {
      call();
    } catch (const InterruptedError&) {
    } catch (const std::exception& e) {
      std::string what = e.what();
      boost::asio::post(io_, [on_error, what] { on_error(what); });
    }
    done->store(true);
  });
}

void StoreTasks::join() {
  std::list<Task> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(tasks_);
  }
  for (auto& t : tasks) {
    if (t.thread.joinable()) t.thread.join();
  }
}

}  // namespace ccrun::agent
