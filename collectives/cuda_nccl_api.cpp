// The seams of device_api.h over the real libcudart and libnccl. Compiled
// only in builds with CCRUN_HAVE_NCCL; everything here is a one-line
// translation, and the logic lives in nccl_group.cpp.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>

#include "device_api.h"

namespace ccrun::collectives {
namespace {

CudaStatus status(cudaError_t e) { return e == cudaSuccess ? nullptr : cudaGetErrorString(e); }
NcclResult result(ncclResult_t r) { return static_cast<NcclResult>(r); }

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::kInt8: return ncclInt8;
    case DataType::kUInt8: return ncclUint8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProd: return ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kAvg: return ncclAvg;
  }
  return ncclSum;
}

cudaStream_t stream(Stream s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t event(Event e) { return static_cast<cudaEvent_t>(e); }
ncclComm_t comm(Comm c) { return static_cast<ncclComm_t>(c); }

class CudaRuntime : public DeviceRuntime {
 public:
  int device_count() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver or no device: not an error for later calls
      return 0;
    }
    return n;
  }
  std::string visible_devices() override {
    const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
    return v ? v : "";
  }
  CudaStatus pointer_info(const void* p, PointerInfo* out) override {
    cudaPointerAttributes a{};
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) return status(e);
    bool device = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
    *out = device ? PointerInfo{DeviceType::kCuda, a.device} : PointerInfo{};
    return nullptr;
  }
  CudaStatus set_device(int d) override { return status(cudaSetDevice(d)); }
  CudaStatus create_stream(Stream* out) override {
    cudaStream_t s = nullptr;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    *out = s;
    return status(e);
  }
  void destroy_stream(Stream s) noexcept override { cudaStreamDestroy(stream(s)); }
  CudaStatus create_event(Event* out) override {
    cudaEvent_t ev = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    *out = ev;
    return status(e);
  }
  void destroy_event(Event e) noexcept override { cudaEventDestroy(event(e)); }
  CudaStatus record_on_default_stream(Event e) override {
    return status(cudaEventRecord(event(e), cudaStreamLegacy));
  }
  CudaStatus record(Event e, Stream s) override { return status(cudaEventRecord(event(e), stream(s))); }
  CudaStatus stream_wait(Stream s, Event e) override {
    return status(cudaStreamWaitEvent(stream(s), event(e), 0));
  }
  CudaStatus query(Event e, bool* done) override {
    cudaError_t r = cudaEventQuery(event(e));
    *done = r == cudaSuccess;
    return r == cudaErrorNotReady ? nullptr : status(r);
  }
  CudaStatus stream_idle(Stream s, bool* idle) override {
    cudaError_t r = cudaStreamQuery(stream(s));
    *idle = r == cudaSuccess;
    return r == cudaErrorNotReady ? nullptr : status(r);
  }
  CudaStatus device_alloc(size_t bytes, void** out) override { return status(cudaMalloc(out, bytes)); }
  void device_free(void* p) noexcept override { cudaFree(p); }
};

class Nccl : public NcclApi {
 public:
  NcclResult get_unique_id(NcclUniqueId* id) override {
    static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes);
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    std::memcpy(id->data(), &u, sizeof u);
    return result(r);
  }
  NcclResult comm_init_rank(Comm* out, int nranks, const NcclUniqueId& id, int rank) override {
    ncclUniqueId u;
    std::memcpy(&u, id.data(), sizeof u);
    ncclComm_t c = nullptr;
    ncclResult_t r = ncclCommInitRank(&c, nranks, u, rank);
    *out = c;
    return result(r);
  }
  NcclResult comm_split(Comm parent, int color, int key, Comm* out) override {
    ncclComm_t c = nullptr;
    ncclResult_t r = ncclCommSplit(comm(parent), color == kNcclNoColor ? NCCL_SPLIT_NOCOLOR : color,
                                   key, &c, nullptr);
    *out = c;
    return result(r);
  }
  NcclResult comm_abort(Comm c) override { return result(ncclCommAbort(comm(c))); }
  NcclResult comm_destroy(Comm c) override { return result(ncclCommDestroy(comm(c))); }
  NcclResult comm_async_error(Comm c, NcclResult* out) override {
    ncclResult_t a = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm(c), &a);
    *out = result(a);
    return result(r);
  }
  std::string error_string(NcclResult r, Comm c) override {
    std::string s = ncclGetErrorString(static_cast<ncclResult_t>(r));
    const char* last = ncclGetLastError(comm(c));
    if (last && *last) s += std::string(" (") + last + ")";
    return s;
  }
  NcclResult all_reduce(const void* send, void* recv, size_t count, DataType t, ReduceOp op,
                        Comm c, Stream s) override {
    return result(ncclAllReduce(send, recv, count, nccl_type(t), nccl_op(op), comm(c), stream(s)));
  }
  NcclResult broadcast(const void* send, void* recv, size_t count, DataType t, int root, Comm c,
                       Stream s) override {
    return result(ncclBroadcast(send, recv, count, nccl_type(t), root, comm(c), stream(s)));
  }
  NcclResult reduce(const void* send, void* recv, size_t count, DataType t, ReduceOp op, int root,
                    Comm c, Stream s) override {
    return result(ncclReduce(send, recv, count, nccl_type(t), nccl_op(op), root, comm(c), stream(s)));
  }
  NcclResult all_gather(const void* send, void* recv, size_t send_count, DataType t, Comm c,
                        Stream s) override {
    return result(ncclAllGather(send, recv, send_count, nccl_type(t), comm(c), stream(s)));
  }
  NcclResult reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t,
                            ReduceOp op, Comm c, Stream s) override {
    return result(ncclReduceScatter(send, recv, recv_count, nccl_type(t), nccl_op(op), comm(c),
                                    stream(s)));
  }
  NcclResult send(const void* buf, size_t count, DataType t, int peer, Comm c, Stream s) override {
    return result(ncclSend(buf, count, nccl_type(t), peer, comm(c), stream(s)));
  }
  NcclResult recv(void* buf, size_t count, DataType t, int peer, Comm c, Stream s) override {
    return result(ncclRecv(buf, count, nccl_type(t), peer, comm(c), stream(s)));
  }
  NcclResult group_start() override { return result(ncclGroupStart()); }
  NcclResult group_end() override { return result(ncclGroupEnd()); }
};

}  // namespace

Devices cuda_devices() { return Devices{std::make_shared<CudaRuntime>(), std::make_shared<Nccl>()}; }

}  // namespace ccrun::collectives
