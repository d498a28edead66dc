// Runs one function per rank, each on a thread of its own, the way the
// collectives' unit tests stand up a group of ranks in one process (Gloo's
// tests do the same); rethrows the first rank's failure once all have ended.
#pragma once

#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace ccrun::test {

inline void on_rank_threads(int size, const std::function<void(int)>& rank_fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        rank_fn(r);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace ccrun::test
