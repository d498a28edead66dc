// The NCCL group's shared state and its Works (see nccl_work.h).
#include "nccl_work.h"

#include <thread>

#include "durations.h"

namespace ccrun::collectives {

using Clock = std::chrono::steady_clock;

std::string nccl_hint(NcclResult r) {
  switch (r) {
    case NcclResult::InvalidArgument:
    case NcclResult::InvalidUsage:
      return "; check the buffers, counts and ranks passed (every rank must issue the same "
             "operations in the same order)";
    case NcclResult::RemoteError:
    case NcclResult::SystemError:
      return "; a peer may have died or the network failed (NCCL_DEBUG=WARN tells more)";
    case NcclResult::UnhandledCudaError:
      return "; a CUDA call inside NCCL failed (a bad buffer, or the GPU is in an error state)";
    default:
      return "";
  }
}

NcclCore::~NcclCore() {
  for (Event e : free_events) dev.runtime->destroy_event(e);
}

std::string NcclCore::locus() const {
  return "on NCCL group " + names + " rank " + std::to_string(global_rank) + " (cuda:" +
         std::to_string(device) + ")";
}

std::string NcclCore::where(const char* op) const { return std::string(op) + " " + locus(); }

std::string NcclCore::failure() {
  std::lock_guard lock(mu);
  return why;
}

void NcclCore::abort(const std::string& reason) {
  std::lock_guard lock(mu);
  if (aborted.load()) return;
  why = reason;
  aborted = true;
  dev.nccl->comm_abort(comm);
}

void NcclCore::check(NcclResult r, const char* op) {
  if (nccl_failed(r)) throw Error(where(op) + ": " + dev.nccl->error_string(r, comm) + nccl_hint(r));
}

void NcclCore::check(CudaStatus s, const char* op) const {
  if (s) throw Error(where(op) + ": CUDA error: " + s);
}

Event NcclCore::take_event(const char* op) {
  {
    std::lock_guard lock(mu);
    if (!free_events.empty()) {
      Event e = free_events.back();
      free_events.pop_back();
      return e;
    }
  }
  Event e = nullptr;
  check(dev.runtime->create_event(&e), op);
  return e;
}

void NcclCore::give_event(Event e) noexcept {
  std::lock_guard lock(mu);
  try {
    free_events.push_back(e);
  } catch (...) {
    // Out of memory growing the pool: destroying the event is as good.
    dev.runtime->destroy_event(e);
  }
}

bool NcclCore::done(Event e, const char* op) {
  if (aborted) throw Error(where(op) + ": the communicator was aborted (" + failure() + ")");
  if (closed) return true;
  NcclResult async = NcclResult::Success;
  NcclResult r = dev.nccl->comm_async_error(comm, &async);
  if (nccl_failed(r)) async = r;
  if (nccl_failed(async)) {
    std::string cause = dev.nccl->error_string(async, comm);
    abort(cause);
    throw Error(where(op) + ": " + cause + nccl_hint(async));
  }
  bool finished = false;
  check(dev.runtime->query(e, &finished), op);
  return finished;
}

void NcclWork::wait() {
  if (!wait_for(core_->timeout)) {
    std::string what = core_->where(op_) + ": timed out after " + format_secs(core_->timeout) +
                       " waiting for the other ranks";
    core_->abort(what);
    throw TimeoutError(what + "; the communicator was aborted, so every later operation of "
                              "this group fails: check that every rank issues the same "
                              "operations, or raise InitOptions::timeout");
  }
}

bool NcclWork::is_completed() {
  if (!core_->done(event_, op_)) return false;
  ticket_.complete();
  return true;
}

bool NcclWork::wait_for(std::chrono::milliseconds timeout) {
  const auto start = Clock::now(), deadline = start + timeout;
  for (;;) {
    if (is_completed()) return true;
    auto now = Clock::now();
    if (now >= deadline) return false;
    if (now - start < std::chrono::microseconds(200)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

}  // namespace ccrun::collectives
