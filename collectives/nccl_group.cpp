// The NCCL backend: a ProcessGroup for CUDA buffers (see
// include/ccrun/collectives.h). Built only when CUDA and NCCL are found
// (CCRUN_WITH_NCCL). The unique id travels through the group's store; each
// group owns one communicator and one stream; an operation is enqueued on
// that stream at once, after the work already issued on the default stream
// (which is where a caller's kernels filling the buffer usually run), and
// completes through a CUDA event. A Work that is not
// done by the group timeout aborts the communicator (ncclCommAbort), so
// every pending and later operation fails instead of hanging.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "ccrun/collectives.h"
#include "ccrun/prefix_store.h"
#include "nccl_group.h"

namespace ccrun::collectives {
namespace {

using std::chrono::milliseconds;

std::string format_secs(milliseconds d) {
  return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + "s"
                               : std::to_string(d.count()) + "ms";
}

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::Int8: return ncclInt8;
    case DataType::UInt8: return ncclUint8;
    case DataType::Int32: return ncclInt32;
    case DataType::Int64: return ncclInt64;
    case DataType::Float16: return ncclFloat16;
    case DataType::BFloat16: return ncclBfloat16;
    case DataType::Float32: return ncclFloat32;
    case DataType::Float64: return ncclFloat64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Prod: return ncclProd;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Avg: return ncclAvg;
  }
  return ncclSum;
}

// State shared by a group and its Works: once aborted, all fail.
struct CommState {
  ncclComm_t comm = nullptr;
  std::atomic<bool> aborted{false};
  std::string why;
  std::mutex mu;  // guards abort
  void abort(const std::string& reason) {
    std::lock_guard lock(mu);
    if (aborted.exchange(true)) return;
    why = reason;
    ncclCommAbort(comm);
  }
};

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<CommState> state, cudaEvent_t event, std::string where, milliseconds timeout)
      : state_(std::move(state)), event_(event), where_(std::move(where)), timeout_(timeout) {}
  ~NcclWork() override { cudaEventDestroy(event_); }

  void wait() override {
    if (!wait_for(timeout_)) {
      state_->abort(where_ + ": timed out");
      throw TimeoutError(where_ + ": timed out after " + format_secs(timeout_) +
                         " waiting for the other ranks; the communicator was aborted");
    }
  }
  bool wait_for(milliseconds timeout) override {
    // CUDA offers no blocking wait with a deadline: poll the event, and the
    // communicator's asynchronous error, between short sleeps.
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (done()) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  bool is_completed() override { return done(); }

 private:
  bool done() {
    if (state_->aborted) throw Error(where_ + ": the communicator was aborted (" + state_->why + ")");
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(state_->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      std::string why = ncclGetErrorString(async);
      state_->abort(why);
      throw Error(where_ + ": " + why + "; a peer may have died");
    }
    cudaError_t e = cudaEventQuery(event_);
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) return false;
    throw Error(where_ + ": CUDA error " + cudaGetErrorString(e));
  }

  std::shared_ptr<CommState> state_;
  cudaEvent_t event_;
  std::string where_;
  milliseconds timeout_;
};

void check(ncclResult_t r, const std::string& where) {
  if (r != ncclSuccess && r != ncclInProgress) {
    throw Error(where + ": " + ncclGetErrorString(r) + " (" + (ncclGetLastError(nullptr) ? ncclGetLastError(nullptr) : "") + ")");
  }
}
void check(cudaError_t e, const std::string& where) {
  if (e != cudaSuccess) throw Error(where + ": CUDA error " + cudaGetErrorString(e));
}

class NcclGroup : public ProcessGroup {
 public:
  NcclGroup(std::shared_ptr<rendezvous::Store> store, int rank, int size, milliseconds timeout,
            std::vector<int> global, ncclComm_t comm = nullptr)
      : store_(std::move(store)), rank_(rank), size_(size), timeout_(timeout), global_(std::move(global)) {
    names_ = "[";
    for (size_t i = 0; i < global_.size(); ++i) names_ += (i ? "," : "") + std::to_string(global_[i]);
    names_ += "]";
    int devices = 0;
    check(cudaGetDeviceCount(&devices), "process group " + names_);
    if (devices == 0) throw Error("process group " + names_ + ": no CUDA device is visible; use the gloo backend");
    const char* lr = std::getenv("LOCAL_RANK");
    device_ = (lr ? std::atoi(lr) : rank) % devices;
    check(cudaSetDevice(device_), "process group " + names_);
    state_ = std::make_shared<CommState>();
    if (comm) {
      state_->comm = comm;
    } else {
      ncclUniqueId id;
      if (rank == 0) {
        check(ncclGetUniqueId(&id), "process group " + names_);
        store_->set("nccl/unique_id", std::string(reinterpret_cast<char*>(&id), sizeof id));
      }
      store_->wait({"nccl/unique_id"}, timeout);
      std::string bytes = store_->get("nccl/unique_id");
      std::memcpy(&id, bytes.data(), sizeof id);
      check(ncclCommInitRank(&state_->comm, size, id, rank), "process group " + names_ + " rank " + std::to_string(rank));
    }
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "process group " + names_);
    check(cudaEventCreateWithFlags(&issued_, cudaEventDisableTiming), "process group " + names_);
  }
  ~NcclGroup() override {
    // Operations still in flight get the group timeout to finish; a peer
    // that never joins them must not hang the destructor.
    auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (!state_->aborted && cudaStreamQuery(stream_) == cudaErrorNotReady) {
      if (std::chrono::steady_clock::now() >= deadline) {
        state_->abort("the group was destroyed with operations pending");
        break;
      }
      std::this_thread::sleep_for(milliseconds(1));
    }
    cudaStreamSynchronize(stream_);
    if (!state_->aborted) ncclCommDestroy(state_->comm);
    if (scratch_) cudaFree(scratch_);
    cudaEventDestroy(issued_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  std::shared_ptr<Work> all_reduce(Buffer b, ReduceOp op) override {
    return run("all_reduce", {b}, [&](cudaStream_t s) {
      return ncclAllReduce(b.data, b.data, b.count, nccl_type(b.dtype), nccl_op(op), state_->comm, s);
    });
  }
  std::shared_ptr<Work> broadcast(Buffer b, int root) override {
    return run("broadcast", {b}, [&](cudaStream_t s) {
      return ncclBroadcast(b.data, b.data, b.count, nccl_type(b.dtype), root, state_->comm, s);
    });
  }
  std::shared_ptr<Work> reduce(Buffer b, int root, ReduceOp op) override {
    return run("reduce", {b}, [&](cudaStream_t s) {
      return ncclReduce(b.data, b.data, b.count, nccl_type(b.dtype), nccl_op(op), root, state_->comm, s);
    });
  }
  std::shared_ptr<Work> all_gather(Buffer send, Buffer recv) override {
    size_check("all_gather", recv.count, send.count * size_);
    return run("all_gather", {send, recv}, [&](cudaStream_t s) {
      return ncclAllGather(send.data, recv.data, send.count, nccl_type(send.dtype), state_->comm, s);
    });
  }
  std::shared_ptr<Work> reduce_scatter(Buffer send, Buffer recv, ReduceOp op) override {
    size_check("reduce_scatter", send.count, recv.count * size_);
    return run("reduce_scatter", {send, recv}, [&](cudaStream_t s) {
      return ncclReduceScatter(send.data, recv.data, recv.count, nccl_type(send.dtype), nccl_op(op), state_->comm, s);
    });
  }
  // gather, scatter and all_to_all: grouped send/recv (NCCL has no such
  // collectives).
  std::shared_ptr<Work> gather(Buffer send, Buffer recv, int root) override {
    if (rank_ == root) size_check("gather", recv.count, send.count * size_);
    return run("gather", {send}, [&](cudaStream_t s) {
      size_t es = element_size(send.dtype);
      ncclResult_t r = ncclGroupStart();
      if (rank_ == root) {
        for (int i = 0; i < size_ && r == ncclSuccess; ++i) {
          r = ncclRecv(static_cast<char*>(recv.data) + i * send.count * es, send.count,
                       nccl_type(send.dtype), i, state_->comm, s);
        }
      }
      if (r == ncclSuccess) r = ncclSend(send.data, send.count, nccl_type(send.dtype), root, state_->comm, s);
      ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    });
  }
  std::shared_ptr<Work> scatter(Buffer send, Buffer recv, int root) override {
    if (rank_ == root) size_check("scatter", send.count, recv.count * size_);
    return run("scatter", {recv}, [&](cudaStream_t s) {
      size_t es = element_size(recv.dtype);
      ncclResult_t r = ncclGroupStart();
      if (rank_ == root) {
        for (int i = 0; i < size_ && r == ncclSuccess; ++i) {
          r = ncclSend(static_cast<char*>(send.data) + i * recv.count * es, recv.count,
                       nccl_type(recv.dtype), i, state_->comm, s);
        }
      }
      if (r == ncclSuccess) r = ncclRecv(recv.data, recv.count, nccl_type(recv.dtype), root, state_->comm, s);
      ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    });
  }
  std::shared_ptr<Work> all_to_all(Buffer send, Buffer recv) override {
    if (send.count % size_ != 0) {
      throw Error(where("all_to_all") + ": send.count is not a multiple of the group size");
    }
    std::vector<size_t> counts(size_, send.count / size_);
    return all_to_all(send, counts, recv, counts);
  }
  std::shared_ptr<Work> all_to_all(Buffer send, std::vector<size_t> sc, Buffer recv,
                                   std::vector<size_t> rc) override {
    if (sc.size() != size_t(size_) || rc.size() != size_t(size_)) {
      throw Error(where("all_to_all") + ": give one count per rank");
    }
    return run("all_to_all", {send, recv}, [&](cudaStream_t s) {
      size_t es = element_size(send.dtype), so = 0, ro = 0;
      ncclResult_t r = ncclGroupStart();
      for (int i = 0; i < size_ && r == ncclSuccess; ++i) {
        if (sc[i]) r = ncclSend(static_cast<char*>(send.data) + so * es, sc[i], nccl_type(send.dtype), i, state_->comm, s);
        if (r == ncclSuccess && rc[i]) r = ncclRecv(static_cast<char*>(recv.data) + ro * es, rc[i], nccl_type(recv.dtype), i, state_->comm, s);
        so += sc[i];
        ro += rc[i];
      }
      ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    });
  }
  std::shared_ptr<Work> send(Buffer b, int dst, int) override {
    return run("send", {b}, [&](cudaStream_t s) {
      return ncclSend(b.data, b.count, nccl_type(b.dtype), dst, state_->comm, s);
    });
  }
  std::shared_ptr<Work> recv(Buffer b, int src, int) override {
    return run("recv", {b}, [&](cudaStream_t s) {
      return ncclRecv(b.data, b.count, nccl_type(b.dtype), src, state_->comm, s);
    });
  }
  std::shared_ptr<Work> barrier() override {
    if (!scratch_) check(cudaMalloc(&scratch_, sizeof(int)), where("barrier"));
    return all_reduce({scratch_, 1, DataType::Int32, DeviceType::Cuda}, ReduceOp::Sum);
  }
  std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks) override {
    int color = NCCL_SPLIT_NOCOLOR, key = 0;
    std::vector<int> global;
    for (size_t i = 0; i < ranks.size(); ++i) {
      global.push_back(global_[ranks[i]]);
      if (ranks[i] == rank_) {
        color = 0;
        key = int(i);
      }
    }
    ncclComm_t sub = nullptr;
    check(ncclCommSplit(state_->comm, color, key, &sub, nullptr), where("new_group"));
    if (color == NCCL_SPLIT_NOCOLOR) return nullptr;
    return std::make_shared<NcclGroup>(store_, key, int(ranks.size()), timeout_, global, sub);
  }

 private:
  std::string where(const std::string& op) const {
    return op + " on group " + names_ + " rank " + std::to_string(global_[rank_]);
  }
  void size_check(const std::string& op, size_t have, size_t need) const {
    if (have != need) {
      throw Error(where(op) + ": the larger buffer holds " + std::to_string(have) +
                  " elements; it must hold group size x count = " + std::to_string(need));
    }
  }
  template <typename F>
  std::shared_ptr<Work> run(const std::string& op, std::vector<Buffer> bufs, F&& enqueue) {
    for (const auto& b : bufs) {
      if (b.device != DeviceType::Cuda) {
        throw NotSupportedError(where(op) + ": the NCCL backend takes CUDA buffers; use a gloo group for host buffers");
      }
    }
    if (state_->aborted) throw Error(where(op) + ": the group failed earlier (" + state_->why + "); create a new one");
    check(cudaSetDevice(device_), where(op));
    // The group's stream does not synchronise with the default stream by
    // itself: wait for what was issued there (and, through the legacy
    // default stream, on every blocking stream) before touching the buffers.
    check(cudaEventRecord(issued_, cudaStreamLegacy), where(op));
    check(cudaStreamWaitEvent(stream_, issued_, 0), where(op));
    check(enqueue(stream_), where(op));
    cudaEvent_t ev;
    check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), where(op));
    check(cudaEventRecord(ev, stream_), where(op));
    return std::make_shared<NcclWork>(state_, ev, where(op), timeout_);
  }

  std::shared_ptr<rendezvous::Store> store_;
  int rank_, size_;
  milliseconds timeout_;
  std::vector<int> global_;
  std::string names_;
  int device_ = 0;
  std::shared_ptr<CommState> state_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t issued_ = nullptr;  // recorded on the default stream before each operation
  void* scratch_ = nullptr;       // barrier's one int
};

}  // namespace

bool nccl_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::shared_ptr<ProcessGroup> create_nccl_group(std::shared_ptr<rendezvous::Store> store, int rank,
                                                int size, std::chrono::milliseconds timeout) {
  std::vector<int> global(size);
  for (int i = 0; i < size; ++i) global[i] = i;
  return std::make_shared<NcclGroup>(std::move(store), rank, size, timeout, global);
}

}  // namespace ccrun::collectives
