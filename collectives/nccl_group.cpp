// The NCCL backend: a ProcessGroup for CUDA buffers (see nccl_group.h),
// written against device_api.h's seams and compiled in every build.
//
// One communicator and one non-blocking stream per group, on the device
// nccl_device_for names. An operation:
//   1. checks its arguments, and that every buffer is CUDA memory of the
//      group's device (one pointer query each);
//   2. records an event on the legacy default stream (where the caller's
//      kernels that fill the buffer usually run) and makes the group's
//      stream wait for it;
//   3. enqueues the NCCL call on the group's stream and records a
//      completion event from the group's pool behind it;
//   4. returns a Work (nccl_work.h) that polls that event and the
//      communicator's asynchronous error. CUDA has no blocking wait with a
//      deadline, so waiting spins briefly (small operations finish in
//      microseconds), then sleeps in short steps.
// A Work not done by the group timeout aborts the communicator
// (ncclCommAbort) and throws TimeoutError; every pending and later
// operation of the group then fails instead of hanging. Destroying a group
// gives operations in flight the group timeout, then aborts.
#include "nccl_group.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "ccrun/prefix_store.h"
#include "argument_rules.h"
#include "durations.h"
#include "nccl_work.h"
#include "progress_writer.h"

namespace ccrun::collectives {
namespace {

using progress::Op;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

class NcclGroup : public ProcessGroup {
 public:
  // Joins the communicator through the store, or takes `comm` (a split).
  // Calls are recorded into `progress`.
  NcclGroup(std::shared_ptr<store::Store> store, int rank, int size, milliseconds timeout,
            Devices dev, std::vector<int> global, Comm comm, int device,
            std::shared_ptr<GroupProgress> progress)
      : store_(std::move(store)), rank_(rank), size_(size), progress_(std::move(progress)) {
    core_ = std::make_shared<NcclCore>();
    core_->dev = std::move(dev);
    core_->timeout = timeout;
    core_->global_rank = global[rank];
    core_->names = "[";
    for (size_t i = 0; i < global.size(); ++i) {
      core_->names += (i ? "," : "") + std::to_string(global[i]);
    }
    core_->names += "]";
    global_ = std::move(global);
    core_->device = device;
    locus_ = core_->locus();
    NcclCore& c = *core_;
    c.check(c.dev.runtime->set_device(device), "init");
    if (comm) {
      c.comm = comm;
    } else {
      c.comm = join(*store_, rank, size, timeout, c);
    }
    Stream stream = nullptr;
    if (CudaStatus s = c.dev.runtime->create_stream(&stream)) {
      c.dev.nccl->comm_destroy(c.comm);
      c.check(s, "init");
    }
    stream_ = stream;
    issued_ = c.take_event("init");
  }

  ~NcclGroup() override {
    NcclCore& c = *core_;
    // Operations in flight get the group timeout; a peer that never joins
    // them must not hang the destructor.
    const auto deadline = Clock::now() + c.timeout;
    for (;;) {
      bool idle = true;
      if (c.aborted || c.dev.runtime->stream_idle(stream_, &idle) != nullptr || idle) break;
      if (Clock::now() >= deadline) {
        c.abort("the group was destroyed with operations in flight for " + format_secs(c.timeout));
        break;
      }
      std::this_thread::sleep_for(milliseconds(1));
    }
    if (!c.aborted) {
      c.closed = true;
      c.dev.nccl->comm_destroy(c.comm);
    }
    if (scratch_) c.dev.runtime->device_free(scratch_);
    c.give_event(issued_);
    c.dev.runtime->destroy_stream(stream_);
  }
  NcclGroup(const NcclGroup&) = delete;  // owns a communicator and a stream
  NcclGroup& operator=(const NcclGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  CollectivesBackend backend() const override { return CollectivesBackend::kNccl; }

  std::shared_ptr<Work> all_reduce(Buffer b, ReduceOp op) override {
    static constexpr const char* kOp = "all_reduce";
    check_buffer(kOp, b);
    ReduceOp o = nccl_reduce_op(op, size_);
    return run(kOp, Op::kAllReduce, b.count, [&](NcclApi& n, Comm c, Stream s) {
      return n.all_reduce(b.data, b.data, b.count, b.dtype, o, c, s);
    });
  }
  std::shared_ptr<Work> broadcast(Buffer b, int root) override {
    static constexpr const char* kOp = "broadcast";
    rules::check_peer(call(kOp), "root", root);
    check_buffer(kOp, b);
    return run(kOp, Op::kBroadcast, b.count, [&](NcclApi& n, Comm c, Stream s) {
      return n.broadcast(b.data, b.data, b.count, b.dtype, root, c, s);
    });
  }
  std::shared_ptr<Work> reduce(Buffer b, int root, ReduceOp op) override {
    static constexpr const char* kOp = "reduce";
    rules::check_peer(call(kOp), "root", root);
    check_buffer(kOp, b);
    ReduceOp o = nccl_reduce_op(op, size_);
    return run(kOp, Op::kReduce, b.count, [&](NcclApi& n, Comm c, Stream s) {
      return n.reduce(b.data, b.data, b.count, b.dtype, o, root, c, s);
    });
  }
  std::shared_ptr<Work> all_gather(Buffer send, Buffer recv) override {
    static constexpr const char* kOp = "all_gather";
    check_pair(kOp, send, recv);
    rules::check_all_gather(call(kOp), send, recv);
    return run(kOp, Op::kAllGather, send.count, [&](NcclApi& n, Comm c, Stream s) {
      return n.all_gather(send.data, recv.data, send.count, send.dtype, c, s);
    });
  }
  std::shared_ptr<Work> reduce_scatter(Buffer send, Buffer recv, ReduceOp op) override {
    static constexpr const char* kOp = "reduce_scatter";
    check_pair(kOp, send, recv);
    rules::check_reduce_scatter(call(kOp), send, recv);
    ReduceOp o = nccl_reduce_op(op, size_);
    return run(kOp, Op::kReduceScatter, send.count, [&](NcclApi& n, Comm c, Stream s) {
      return n.reduce_scatter(send.data, recv.data, recv.count, send.dtype, o, c, s);
    });
  }
  // gather, scatter and all_to_all: grouped send/recv (NCCL has no such
  // collectives).
  std::shared_ptr<Work> gather(Buffer send, Buffer recv, int root) override {
    static constexpr const char* kOp = "gather";
    check_buffer(kOp, send);
    if (rank_ == root) check_buffer(kOp, recv);
    rules::check_gather(call(kOp), send, recv, root);
    return run(kOp, Op::kGather, send.count, [&](NcclApi& n, Comm c, Stream s) {
      const size_t es = element_size(send.dtype);
      return grouped(n, [&] {
        NcclResult r = NcclResult::Success;
        if (rank_ == root) {
          for (int i = 0; i < size_ && !nccl_failed(r); ++i) {
            r = n.recv(static_cast<char*>(recv.data) + i * send.count * es, send.count,
                       send.dtype, i, c, s);
          }
        }
        return nccl_failed(r) ? r : n.send(send.data, send.count, send.dtype, root, c, s);
      });
    });
  }
  std::shared_ptr<Work> scatter(Buffer send, Buffer recv, int root) override {
    static constexpr const char* kOp = "scatter";
    check_buffer(kOp, recv);
    if (rank_ == root) check_buffer(kOp, send);
    rules::check_scatter(call(kOp), send, recv, root);
    return run(kOp, Op::kScatter, recv.count, [&](NcclApi& n, Comm c, Stream s) {
      const size_t es = element_size(recv.dtype);
      return grouped(n, [&] {
        NcclResult r = NcclResult::Success;
        if (rank_ == root) {
          for (int i = 0; i < size_ && !nccl_failed(r); ++i) {
            r = n.send(static_cast<char*>(send.data) + i * recv.count * es, recv.count,
                       recv.dtype, i, c, s);
          }
        }
        return nccl_failed(r) ? r : n.recv(recv.data, recv.count, recv.dtype, root, c, s);
      });
    });
  }
  std::shared_ptr<Work> all_to_all(Buffer send, Buffer recv) override {
    std::vector<size_t> counts = rules::equal_split(call("all_to_all"), send, recv);
    return all_to_all(send, counts, recv, counts);
  }
  std::shared_ptr<Work> all_to_all(Buffer send, std::vector<size_t> sc, Buffer recv,
                                   std::vector<size_t> rc) override {
    static constexpr const char* kOp = "all_to_all";
    check_pair(kOp, send, recv);
    rules::check_all_to_all(call(kOp), send, sc, recv, rc);
    return run(kOp, Op::kAllToAll, send.count, [&](NcclApi& n, Comm c, Stream s) {
      const size_t es = element_size(send.dtype);
      return grouped(n, [&] {
        NcclResult r = NcclResult::Success;
        size_t so = 0, ro = 0;
        for (int i = 0; i < size_ && !nccl_failed(r); ++i) {
          if (sc[i]) r = n.send(static_cast<char*>(send.data) + so * es, sc[i], send.dtype, i, c, s);
          if (!nccl_failed(r) && rc[i]) {
            r = n.recv(static_cast<char*>(recv.data) + ro * es, rc[i], recv.dtype, i, c, s);
          }
          so += sc[i];
          ro += rc[i];
        }
        return r;
      });
    });
  }
  // The tag is checked, then ignored (collectives.h): NCCL matches a pair's
  // sends and recvs in issue order.
  std::shared_ptr<Work> send(Buffer b, int dst, int tag) override {
    static constexpr const char* kOp = "send";
    rules::check_peer(call(kOp), "dst", dst);
    rules::check_tag(call(kOp), tag);
    check_buffer(kOp, b);
    return run(kOp, Op::kSend, b.count, [&](NcclApi& n, Comm c, Stream s) {
      return n.send(b.data, b.count, b.dtype, dst, c, s);
    });
  }
  std::shared_ptr<Work> recv(Buffer b, int src, int tag) override {
    static constexpr const char* kOp = "recv";
    rules::check_peer(call(kOp), "src", src);
    rules::check_tag(call(kOp), tag);
    check_buffer(kOp, b);
    return run(kOp, Op::kRecv, b.count, [&](NcclApi& n, Comm c, Stream s) {
      return n.recv(b.data, b.count, b.dtype, src, c, s);
    });
  }
  // An all_reduce of one int, recorded as a barrier.
  std::shared_ptr<Work> barrier() override {
    static constexpr const char* kOp = "barrier";
    if (!scratch_) {
      core_->check(core_->dev.runtime->set_device(core_->device), kOp);
      core_->check(core_->dev.runtime->device_alloc(sizeof(int32_t), &scratch_), kOp);
    }
    return run(kOp, Op::kBarrier, 0, [&](NcclApi& n, Comm c, Stream s) {
      return n.all_reduce(scratch_, scratch_, 1, DataType::kInt32, ReduceOp::kSum, c, s);
    });
  }
  std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks) override {
    return split(std::move(ranks), nullptr);
  }
  // new_group, the subgroup recording into `progress`; null: into a slot
  // of its own, from this group's record.
  std::shared_ptr<ProcessGroup> split(std::vector<int> ranks, std::shared_ptr<GroupProgress> progress) {
    static constexpr const char* kOp = "new_group";
    NcclCore& c = *core_;
    rules::check_group_ranks(call(kOp), ranks);
    const std::pair<int, int> ck = nccl_split_colour(ranks, rank_);
    const int id = ++groups_made_;  // every rank counts, members or not
    if (c.aborted) throw Error(c.where(kOp) + ": the group failed earlier (" + c.failure() + ")");
    c.check(c.dev.runtime->set_device(c.device), kOp);
    Comm sub = nullptr;
    c.check(c.dev.nccl->comm_split(c.comm, ck.first, ck.second, &sub), kOp);
    if (ck.first == kNcclNoColor) return nullptr;
    std::vector<int> global;
    for (int r : ranks) global.push_back(global_[r]);
    auto store = std::make_shared<store::PrefixStore>("group" + std::to_string(id), store_);
    const bool own = !progress;
    if (own) progress = std::make_shared<GroupProgress>(progress_->record());
    const uint64_t progress_id = subgroup_id(global);
    auto group = std::make_shared<NcclGroup>(store, ck.second, int(ranks.size()), c.timeout, c.dev,
                                             std::move(global), sub, c.device, progress);
    if (own) progress->open(progress_id, uint32_t(ranks.size()));
    return group;
  }

 private:
  // Joins a new communicator: rank 0 makes the unique id and publishes it
  // under "unique_id"; the others wait for it (up to the timeout). Then
  // every rank checks in under "joined/<rank>" and waits for all the
  // others, so a rank that never comes (dead, or not issuing the CUDA
  // operation that makes the communicator) is a TimeoutError naming it,
  // not a hang inside ncclCommInitRank, which has no timeout.
  static Comm join(store::Store& store, int rank, int size, milliseconds timeout, NcclCore& c) {
    NcclUniqueId id{};
    if (rank == 0) {
      c.check(c.dev.nccl->get_unique_id(&id), "init");
      store.set("unique_id", std::string(id.data(), id.size()));
    } else {
      try {
        store.wait({"unique_id"}, timeout);
      } catch (const TimeoutError&) {
        throw TimeoutError(c.where("init") + ": rank 0 did not publish the NCCL unique id within " +
                           format_secs(timeout) + "; is rank 0 running, and creating the same group?");
      }
      std::string bytes = store.get("unique_id");
      if (bytes.size() != id.size()) {
        throw ProtocolError(c.where("init") + ": the NCCL unique id in the store has " +
                            std::to_string(bytes.size()) + " bytes, expected " +
                            std::to_string(id.size()) + "; another program shares this store prefix");
      }
      std::memcpy(id.data(), bytes.data(), id.size());
    }
    store.set("joined/" + std::to_string(rank), "1");
    std::vector<std::string> joined;
    for (int r = 0; r < size; ++r) joined.push_back("joined/" + std::to_string(r));
    try {
      store.wait(joined, timeout);
    } catch (const TimeoutError&) {
      std::string missing;
      for (int r = 0; r < size; ++r) {
        if (!store.check({joined[size_t(r)]})) missing += (missing.empty() ? "" : ",") + std::to_string(r);
      }
      throw TimeoutError(c.where("init") + ": rank(s) " + missing + " of this group did not come to make " +
                         "the NCCL communicator within " + format_secs(timeout) +
                         "; every rank must issue the same CUDA operations (the first one makes it)");
    }
    Comm comm = nullptr;
    c.check(c.dev.nccl->comm_init_rank(&comm, size, id, rank), "init");
    return comm;
  }

  rules::Call call(const char* op) const { return {op, locus_, rank_, size_}; }
  // Declared CUDA, and really memory of this group's device.
  void check_buffer(const char* op, const Buffer& b) const {
    rules::check_buffer(call(op), b, DeviceType::kCuda);
    if (b.count == 0) return;
    PointerInfo info;
    core_->check(core_->dev.runtime->pointer_info(b.data, &info), op);
    if (info.kind != DeviceType::kCuda) {
      throw Error(core_->where(op) + ": the buffer is host memory, though marked CUDA; pass "
                                     "memory from cudaMalloc on cuda:" +
                  std::to_string(core_->device));
    }
    if (info.device != core_->device) {
      throw Error(core_->where(op) + ": the buffer is on cuda:" + std::to_string(info.device) +
                  ", this group runs on cuda:" + std::to_string(core_->device) +
                  " (LOCAL_RANK's device); allocate it there");
    }
  }
  void check_pair(const char* op, const Buffer& send, const Buffer& recv) const {
    check_buffer(op, send);
    check_buffer(op, recv);
  }
  template <typename F>
  static NcclResult grouped(NcclApi& n, F&& calls) {
    NcclResult r = n.group_start();
    if (nccl_failed(r)) return r;
    r = calls();
    NcclResult end = n.group_end();
    return nccl_failed(r) ? r : end;
  }
  // Steps 2-4 of the file comment, for a checked operation; records it
  // (`what`, `count` elements) in the group's progress slot once enqueued.
  template <typename F>
  std::shared_ptr<Work> run(const char* op, Op what, size_t count, F&& enqueue) {
    NcclCore& c = *core_;
    if (c.aborted) {
      throw Error(c.where(op) + ": the group failed earlier (" + c.failure() +
                  "); create a new one");
    }
    DeviceRuntime& rt = *c.dev.runtime;
    c.check(rt.set_device(c.device), op);
    c.check(rt.record_on_default_stream(issued_), op);
    c.check(rt.stream_wait(stream_, issued_), op);
    c.check(enqueue(*c.dev.nccl, c.comm, stream_), op);
    Event done = c.take_event(op);
    if (CudaStatus s = rt.record(done, stream_)) {
      c.give_event(done);
      c.check(s, op);
    }
    return std::make_shared<NcclWork>(core_, done, op, progress_->issue(what, count));
  }

  std::shared_ptr<store::Store> store_;
  int rank_, size_;
  std::vector<int> global_;
  std::string locus_;  // "on NCCL group [0,1] rank 1 (cuda:1)", for argument errors
  std::shared_ptr<NcclCore> core_;
  Stream stream_ = nullptr;
  Event issued_ = nullptr;   // recorded on the default stream before each operation
  void* scratch_ = nullptr;  // barrier's one int
  int groups_made_ = 0;      // caller's thread only
  std::shared_ptr<GroupProgress> progress_;  // caller's thread only; may be another group's too
};

}  // namespace

int nccl_device_for(DeviceRuntime& runtime, int rank) {
  const int devices = runtime.device_count();
  std::string visible = runtime.visible_devices();
  std::string seen = visible.empty() ? "CUDA_VISIBLE_DEVICES unset"
                                     : "CUDA_VISIBLE_DEVICES=" + visible;
  if (devices <= 0) {
    throw NotSupportedError("NCCL backend: no CUDA device is visible (" + seen +
                            "); use host buffers, or run where a GPU is");
  }
  const char* lr = std::getenv("LOCAL_RANK");
  if (!lr || !*lr) return rank % devices;
  char* end = nullptr;
  long local = std::strtol(lr, &end, 10);
  if (*end || local < 0) {
    throw ConfigError(std::string("NCCL backend: LOCAL_RANK=\"") + lr + "\" is not a rank");
  }
  if (local >= devices) {
    throw ConfigError("NCCL backend: LOCAL_RANK " + std::to_string(local) + " has no GPU of its own: " +
                      std::to_string(devices) + " visible (" + seen +
                      "); run at most that many processes per node (--nproc-per-node), one GPU each");
  }
  return int(local);
}

std::pair<int, int> nccl_split_colour(const std::vector<int>& ranks, int rank) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank) return {0, int(i)};
  }
  return {kNcclNoColor, 0};
}

ReduceOp nccl_reduce_op(ReduceOp op, int size) {
  return size == 1 && op == ReduceOp::kAvg ? ReduceOp::kSum : op;
}

std::shared_ptr<ProcessGroup> create_nccl_group(std::shared_ptr<store::Store> store, int rank,
                                                int size, std::chrono::milliseconds timeout,
                                                Devices devices, std::vector<int> global,
                                                std::shared_ptr<GroupProgress> progress) {
  if (!devices.nccl) {
    throw NotSupportedError("NCCL backend: this build has none (CUDA and NCCL were not found "
                            "when it was configured; see CCRUN_WITH_NCCL in the README); use host "
                            "buffers with the gloo or auto backend");
  }
  const bool world = global.empty();
  if (world) {
    for (int i = 0; i < size; ++i) global.push_back(i);
  }
  // The device follows the rank in the whole job, so a subgroup made from
  // its own unique id lands where its parent is.
  const int device = nccl_device_for(*devices.runtime, global[size_t(rank)]);
  const bool own = !progress;
  if (own) progress = std::make_shared<GroupProgress>();
  const uint64_t progress_id = world ? kWorldGroupId : subgroup_id(global);
  auto group = std::make_shared<NcclGroup>(std::move(store), rank, size, timeout,
                                           std::move(devices), std::move(global), nullptr, device,
                                           progress);
  if (own) progress->open(progress_id, uint32_t(size));
  return group;
}

std::shared_ptr<ProcessGroup> split_nccl_group(ProcessGroup& nccl, std::vector<int> ranks,
                                               std::shared_ptr<GroupProgress> progress) {
  auto* g = dynamic_cast<NcclGroup*>(&nccl);
  if (!g) throw Error("split_nccl_group: the group is not an NCCL group (a bug in ccrun)");
  return g->split(std::move(ranks), std::move(progress));
}

}  // namespace ccrun::collectives
