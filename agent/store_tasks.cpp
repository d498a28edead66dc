// StoreTasks: store calls on threads of their own (see store_tasks.h).
#include "store_tasks.h"

#include <boost/asio/post.hpp>
#include <exception>

#include "ccrun/error.h"

namespace ccrun::agent {

void StoreTasks::run(std::function<void()> call,
                     std::function<void(const std::string&)> on_error) {
  threads_.emplace_back([this, call = std::move(call), on_error = std::move(on_error)] {
    try {
      call();
    } catch (const InterruptedError&) {
    } catch (const std::exception& e) {
      std::string what = e.what();
      boost::asio::post(io_, [on_error, what] { on_error(what); });
    }
  });
}

void StoreTasks::join() {
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

}  // namespace ccrun::agent
