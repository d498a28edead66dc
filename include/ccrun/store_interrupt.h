//===- ccrun/store_interrupt.h - Wakes blocked store calls -------*- C++ -*-===//
//
// A `StoreInterrupt` lets one thread end the blocking calls another thread
// is making on TcpStore clients: an agent that receives SIGTERM while its
// rendezvous thread waits for the other nodes (or reconnects to a store that
// is gone) must stop now, not after join_timeout, and must not leave that
// thread running while it tears the store down.
//
//   auto interrupt = std::make_shared<StoreInterrupt>();
//   opts.interrupt = interrupt;            // TcpStoreOptions
//   ... another thread: store.wait({"k"}) ...
//   interrupt->trigger();                  // that wait throws InterruptedError
//   ... join the thread ...
//   interrupt->reset();                    // the stores are usable again
//
// It is an eventfd: every client polls it beside its socket, so a trigger
// wakes any number of blocked calls at once. Thread-safe.
//
//===----------------------------------------------------------------------===//
#pragma once

namespace ccrun::store {

class StoreInterrupt {
 public:
  StoreInterrupt();  // throws ccrun::Error when no eventfd can be made
  ~StoreInterrupt();
  StoreInterrupt(const StoreInterrupt&) = delete;  // owns a descriptor
  StoreInterrupt& operator=(const StoreInterrupt&) = delete;

  // Every blocking call of the stores sharing this interrupt, current and
  // later, throws InterruptedError until reset().
  void trigger();
  // Calls block normally again.
  void reset();
  [[nodiscard]] bool triggered() const;

  // Readable while triggered (for poll()).
  [[nodiscard]] int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

}  // namespace ccrun::store
