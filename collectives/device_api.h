//===- device_api.h - The seams below the NCCL backend ----------*- C++ -*-===//
//
// The CUDA runtime and NCCL as the NCCL process group (nccl_group.cpp) and
// the dispatching group (dispatch_group.cpp) see them: two small interfaces
// with no CUDA header behind them. cuda_nccl_api.cpp implements them over
// libcudart and libnccl (builds with CCRUN_HAVE_NCCL); CPU tests implement
// them over host memory (tests/collectives/fake_nccl.h), so the group's own
// logic (argument and device checks, unique-id exchange, subgroup colours,
// error and timeout mapping, stream ordering) runs in CI, which has no GPU.
//
//   Devices d = default_devices();          // real CUDA + NCCL, or none
//   if (d.runtime->device_count() > 0) ...  // never creates a CUDA context
//
// Handles (Stream, Event, Comm) are the implementation's own pointers
// (cudaStream_t, cudaEvent_t, ncclComm_t); only it interprets them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>

#include "ccrun/collectives.h"

namespace ccrun::collectives {

using Stream = void*;
using Event = void*;
using Comm = void*;

// nullptr on success, else the runtime's own words for the error
// ("an illegal memory access was encountered").
using CudaStatus = const char*;

// Where a pointer lives: host memory (device == -1) or memory of CUDA
// device `device` (device allocations and managed memory alike).
struct PointerInfo {
  DeviceType kind = DeviceType::kHost;
  int device = -1;
};

// The CUDA runtime, per process. Every call acts on the calling thread's
// current device (set_device), as the CUDA runtime does.
class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  // Devices this process sees (after CUDA_VISIBLE_DEVICES); 0 without a
  // driver or device. Creates no context.
  virtual int device_count() = 0;
  // The value of CUDA_VISIBLE_DEVICES as this process sees it ("" if unset),
  // for error messages.
  virtual std::string visible_devices() = 0;
  virtual CudaStatus pointer_info(const void* p, PointerInfo* out) = 0;
  virtual CudaStatus set_device(int device) = 0;
  // A non-blocking stream on the current device (no implicit ordering with
  // the legacy default stream).
  virtual CudaStatus create_stream(Stream* out) = 0;
  virtual void destroy_stream(Stream s) noexcept = 0;
  virtual CudaStatus create_event(Event* out) = 0;  // timing disabled
  virtual void destroy_event(Event e) noexcept = 0;
  // Records `e` on the legacy default stream: after everything issued there
  // and, through its implicit synchronisation, on every blocking stream.
  virtual CudaStatus record_on_default_stream(Event e) = 0;
  virtual CudaStatus record(Event e, Stream s) = 0;
  // Work issued to `s` from now on waits for `e`.
  virtual CudaStatus stream_wait(Stream s, Event e) = 0;
  // *done = whether everything before the record of `e` has run.
  virtual CudaStatus query(Event e, bool* done) = 0;
  // *idle = whether `s` has nothing left to run.
  virtual CudaStatus stream_idle(Stream s, bool* idle) = 0;
  virtual CudaStatus device_alloc(size_t bytes, void** out) = 0;
  virtual void device_free(void* p) noexcept = 0;
};

// ncclResult_t, value for value.
enum class NcclResult {
  Success = 0,
  UnhandledCudaError = 1,
  SystemError = 2,
  InternalError = 3,
  InvalidArgument = 4,
  InvalidUsage = 5,
  RemoteError = 6,
  InProgress = 7,
};

inline constexpr size_t kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
using NcclUniqueId = std::array<char, kNcclUniqueIdBytes>;
// The colour of a rank that ncclCommSplit leaves out (NCCL_SPLIT_NOCOLOR).
inline constexpr int kNcclNoColor = -1;

// NCCL's calls, one for one. Collectives enqueue on `stream` and return at
// once; the ccrun DataType and ReduceOp map to NCCL's (Avg to ncclAvg).
class NcclApi {
 public:
  virtual ~NcclApi() = default;
  virtual NcclResult get_unique_id(NcclUniqueId* id) = 0;
  // Blocks until all `nranks` ranks called it with `id`.
  virtual NcclResult comm_init_rank(Comm* out, int nranks, const NcclUniqueId& id, int rank) = 0;
  // Collective over `parent`'s ranks; *out = nullptr for colour kNcclNoColor.
  virtual NcclResult comm_split(Comm parent, int color, int key, Comm* out) = 0;
  virtual NcclResult comm_abort(Comm comm) = 0;
  virtual NcclResult comm_destroy(Comm comm) = 0;
  // The communicator's asynchronous error (a peer gone, a network failure).
  virtual NcclResult comm_async_error(Comm comm, NcclResult* out) = 0;
  // ncclGetErrorString(r) and, when NCCL has one, its last error detail.
  virtual std::string error_string(NcclResult r, Comm comm) = 0;

  virtual NcclResult all_reduce(const void* send, void* recv, size_t count, DataType t,
                                ReduceOp op, Comm comm, Stream s) = 0;
  virtual NcclResult broadcast(const void* send, void* recv, size_t count, DataType t, int root,
                               Comm comm, Stream s) = 0;
  virtual NcclResult reduce(const void* send, void* recv, size_t count, DataType t, ReduceOp op,
                            int root, Comm comm, Stream s) = 0;
  virtual NcclResult all_gather(const void* send, void* recv, size_t send_count, DataType t,
                                Comm comm, Stream s) = 0;
  virtual NcclResult reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t,
                                    ReduceOp op, Comm comm, Stream s) = 0;
  virtual NcclResult send(const void* buf, size_t count, DataType t, int peer, Comm comm,
                          Stream s) = 0;
  virtual NcclResult recv(void* buf, size_t count, DataType t, int peer, Comm comm, Stream s) = 0;
  // Sends and receives between group_start and group_end progress together.
  virtual NcclResult group_start() = 0;
  virtual NcclResult group_end() = 0;
};

// What a process group runs CUDA work on. nccl is null in builds without
// NCCL; runtime is never null (without CUDA it reports no device).
struct Devices {
  std::shared_ptr<DeviceRuntime> runtime;
  std::shared_ptr<NcclApi> nccl;
};

// The real CUDA runtime and NCCL in builds with CCRUN_HAVE_NCCL; otherwise
// a runtime that sees no device and no NCCL.
Devices default_devices();

}  // namespace ccrun::collectives
