//===- nccl_work.h - The NCCL group's shared state and its Works -*- C++ -*-=//
//
// NcclCore is what an NCCL group (nccl_group.cpp) and the Works it returns
// share: the communicator, whether it was aborted and why, and a pool of
// completion events. NcclWork is one operation's completion: it polls its
// event and the communicator's asynchronous error, and aborts the
// communicator when the group timeout passes. Both talk to CUDA and NCCL
// only through device_api.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ccrun/collectives.h"
#include "device_api.h"
#include "progress_writer.h"

namespace ccrun::collectives {

// Whether r is a failure (ncclInProgress is not).
inline bool nccl_failed(NcclResult r) {
  return r != NcclResult::Success && r != NcclResult::InProgress;
}

// What a failed NCCL result means for the caller, in words that say what to
// do ("; a peer may have died ..."), or "".
std::string nccl_hint(NcclResult r);

// State shared by a group and its Works. The group sets the fields before
// the first Work exists; after that only aborted, closed, why and
// free_events change.
struct NcclCore {
  Devices dev;
  Comm comm = nullptr;
  int device = 0;
  std::chrono::milliseconds timeout{};
  std::string names;  // "[0,1,2]": the group's ranks in the job
  int global_rank = 0;

  std::atomic<bool> aborted{false};
  // The group was destroyed after its stream drained: every Work is done,
  // and comm is gone.
  std::atomic<bool> closed{false};
  std::mutex mu;
  std::string why;                 // guarded by mu; set once, before aborted
  std::vector<Event> free_events;  // guarded by mu

  NcclCore() = default;
  NcclCore(const NcclCore&) = delete;  // owns the pooled events
  NcclCore& operator=(const NcclCore&) = delete;
  ~NcclCore();

  // "all_reduce on NCCL group [0,1] rank 1 (cuda:1)": built only for errors.
  std::string where(const char* op) const;
  // The same less the operation: "on NCCL group [0,1] rank 1 (cuda:1)".
  std::string locus() const;
  std::string failure();
  // Aborts the communicator once; later calls keep the first reason.
  void abort(const std::string& reason);
  // Throw Error naming `op` and the cause when r or s is a failure.
  void check(NcclResult r, const char* op);
  void check(CudaStatus s, const char* op) const;
  // A completion event from the pool, or a new one.
  Event take_event(const char* op);
  void give_event(Event e) noexcept;
  // Whether everything before the record of `e` has run. Throws when the
  // communicator was aborted or reports an asynchronous error (aborting it).
  bool done(Event e, const char* op);
};

class NcclWork final : public Work {
 public:
  // `ticket`: the call in its group's progress slot, completed when this
  // Work is first seen done.
  NcclWork(std::shared_ptr<NcclCore> core, Event event, const char* op, ProgressTicket ticket)
      : core_(std::move(core)), event_(event), op_(op), ticket_(ticket) {}
  ~NcclWork() override { core_->give_event(event_); }
  NcclWork(const NcclWork&) = delete;  // owns its event until destroyed
  NcclWork& operator=(const NcclWork&) = delete;

  // Waits up to the group timeout; past it, aborts the communicator and
  // throws TimeoutError.
  void wait() override;
  // Polls: spins for the first 200 us (most operations are done by then),
  // then sleeps in steps of 100 us. CUDA has no wait with a deadline.
  bool wait_for(std::chrono::milliseconds timeout) override;
  bool is_completed() override;

 private:
  std::shared_ptr<NcclCore> core_;
  Event event_;
  const char* op_;  // a string literal
  ProgressTicket ticket_;
};

}  // namespace ccrun::collectives
