// The MPI backend: each ProcessGroup operation as one non-blocking MPI call
// on the group's communicator, run by the process's MPI engine (see
// mpi_group.h and mpi_engine.h). The arguments are checked here, on the
// caller's thread, by the rules every backend shares (argument_rules.h).
// Compiled into the mpi_group module (libccrun_mpi_group.so) only, with
// mpi_engine.cpp and its own copies of the pure helpers it shares with the
// collectives library (argument_rules, reduce_functions, progress_writer);
// its one exported symbol is the entry point at the end of this file.
#include "mpi_group.h"

#include <climits>
#include <mutex>

#include "argument_rules.h"
#include "mpi_engine.h"
#include "reduce_functions.h"

namespace ccrun::collectives {
namespace {

using progress::Op;
using std::chrono::milliseconds;
using Start = std::function<void(Requests&)>;

// The MPI type a buffer travels as. float16 and bfloat16 have none: they
// move as 16-bit words and reduce with the engine's own MPI_Ops.
MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kFloat16:
    case DataType::kBFloat16: return MPI_UINT16_T;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
  }
  return MPI_BYTE;
}

// MPI counts are ints: larger calls are refused rather than cut.
int mpi_count(const rules::Call& call, size_t n) {
  if (n > size_t(INT_MAX)) {
    throw Error(call.where() + ": " + std::to_string(n) + " elements in one call; MPI takes at most " +
                std::to_string(INT_MAX) + " (split the buffer)");
  }
  return int(n);
}

// Counts and displacements for MPI_Ialltoallv, as ints.
struct Layout {
  std::vector<int> counts, displs;
};
Layout layout(const rules::Call& call, const std::vector<size_t>& counts) {
  Layout l;
  size_t at = 0;
  for (size_t c : counts) {
    l.counts.push_back(mpi_count(call, c));
    l.displs.push_back(mpi_count(call, at));
    at += c;
  }
  return l;
}

MPI_Request* next(Requests& r) {
  r.push_back(MPI_REQUEST_NULL);
  return &r.back();
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s + "]";
}

// Avg is a sum, divided here once it is done.
std::function<void()> divide_if_avg(ReduceOp op, Buffer b, int size) {
  if (op != ReduceOp::kAvg) return {};
  return [b, size] { divide(b.data, b.count, b.dtype, size); };
}

class MpiGroup : public ProcessGroup {
 public:
  // `comm` is ready (its communicator made); `global` holds the job rank of each member.
  MpiGroup(std::shared_ptr<MpiEngine> engine, std::shared_ptr<MpiComm> comm, int rank,
           std::vector<int> global, std::shared_ptr<GroupProgress> progress)
      : engine_(std::move(engine)), comm_(std::move(comm)), rank_(rank), size_(int(global.size())),
        global_(std::move(global)), progress_(std::move(progress)) {}

  // Frees the communicator once the operations queued before are posted
  // (MPI lets those in flight end first; a broken group's stays), and waits
  // for that, which takes one turn of the engine: a program that
  // initialised MPI itself may call MPI_Finalize once its groups are gone.
  ~MpiGroup() override {
    auto op = std::make_unique<MpiOp>();
    op->comm = comm_;
    op->name = "the group's end";
    op->work = std::make_shared<HostWork>();
    op->start = [comm = comm_](Requests&) {
      if (comm->comm != MPI_COMM_NULL) check_mpi(MPI_Comm_free(&comm->comm), "MPI_Comm_free");
    };
    std::shared_ptr<HostWork> freed = op->work;
    {
      std::lock_guard lock(mu_);
      engine_->submit(std::move(op));
    }
    try {
      freed->wait();
    } catch (const Error&) {
      // The group failed earlier: its communicator is left to MPI's end.
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  CollectivesBackend backend() const override { return CollectivesBackend::kMpi; }

  std::shared_ptr<Work> all_reduce(Buffer buf, ReduceOp op) override {
    const rules::Call c = call("all_reduce");
    check_host(c, buf);
    const int n = mpi_count(c, buf.count);
    const MPI_Op mop = engine_->reduce_op(buf.dtype, op);
    return submit(Op::kAllReduce, c, buf.count, [=, comm = comm_->comm](Requests& r) {
      if (n == 0) return;
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buf.data, n, mpi_type(buf.dtype), mop, comm, next(r)),
                "MPI_Iallreduce");
    }, divide_if_avg(op, buf, size_));
  }

  std::shared_ptr<Work> broadcast(Buffer buf, int root) override {
    const rules::Call c = call("broadcast");
    check_host(c, buf);
    rules::check_peer(c, "root", root);
    const int n = mpi_count(c, buf.count);
    return submit(Op::kBroadcast, c, buf.count, [=, comm = comm_->comm](Requests& r) {
      if (n == 0) return;
      check_mpi(MPI_Ibcast(buf.data, n, mpi_type(buf.dtype), root, comm, next(r)), "MPI_Ibcast");
    });
  }

  std::shared_ptr<Work> reduce(Buffer buf, int root, ReduceOp op) override {
    const rules::Call c = call("reduce");
    check_host(c, buf);
    rules::check_peer(c, "root", root);
    const int n = mpi_count(c, buf.count);
    const MPI_Op mop = engine_->reduce_op(buf.dtype, op);
    const bool is_root = rank_ == root;
    return submit(Op::kReduce, c, buf.count, [=, comm = comm_->comm](Requests& r) {
      if (n == 0) return;
      // Root reduces in place; the others' buffers are only read.
      check_mpi(MPI_Ireduce(is_root ? MPI_IN_PLACE : buf.data, is_root ? buf.data : nullptr, n,
                            mpi_type(buf.dtype), mop, root, comm, next(r)),
                "MPI_Ireduce");
    }, is_root ? divide_if_avg(op, buf, size_) : nullptr);
  }

  std::shared_ptr<Work> all_gather(Buffer send, Buffer recv) override {
    const rules::Call c = call("all_gather");
    check_host(c, send);
    check_host(c, recv);
    rules::check_all_gather(c, send, recv);
    mpi_count(c, recv.count);
    const int n = mpi_count(c, send.count);
    return submit(Op::kAllGather, c, send.count, [=, comm = comm_->comm](Requests& r) {
      if (n == 0) return;
      const MPI_Datatype t = mpi_type(send.dtype);
      check_mpi(MPI_Iallgather(send.data, n, t, recv.data, n, t, comm, next(r)), "MPI_Iallgather");
    });
  }

  std::shared_ptr<Work> gather(Buffer send, Buffer recv, int root) override {
    const rules::Call c = call("gather");
    check_host(c, send);
    if (rank_ == root) check_host(c, recv);
    rules::check_gather(c, send, recv, root);
    mpi_count(c, recv.count);
    const int n = mpi_count(c, send.count);
    return submit(Op::kGather, c, send.count, [=, comm = comm_->comm](Requests& r) {
      if (n == 0) return;
      const MPI_Datatype t = mpi_type(send.dtype);
      check_mpi(MPI_Igather(send.data, n, t, recv.data, n, t, root, comm, next(r)), "MPI_Igather");
    });
  }

  std::shared_ptr<Work> scatter(Buffer send, Buffer recv, int root) override {
    const rules::Call c = call("scatter");
    check_host(c, recv);
    if (rank_ == root) check_host(c, send);
    rules::check_scatter(c, send, recv, root);
    mpi_count(c, send.count);
    const int n = mpi_count(c, recv.count);
    return submit(Op::kScatter, c, recv.count, [=, comm = comm_->comm](Requests& r) {
      if (n == 0) return;
      const MPI_Datatype t = mpi_type(recv.dtype);
      check_mpi(MPI_Iscatter(send.data, n, t, recv.data, n, t, root, comm, next(r)), "MPI_Iscatter");
    });
  }

  std::shared_ptr<Work> reduce_scatter(Buffer send, Buffer recv, ReduceOp op) override {
    const rules::Call c = call("reduce_scatter");
    check_host(c, send);
    check_host(c, recv);
    rules::check_reduce_scatter(c, send, recv);
    mpi_count(c, send.count);
    const int n = mpi_count(c, recv.count);
    const MPI_Op mop = engine_->reduce_op(send.dtype, op);
    return submit(Op::kReduceScatter, c, send.count, [=, comm = comm_->comm](Requests& r) {
      if (n == 0) return;
      check_mpi(MPI_Ireduce_scatter_block(send.data, recv.data, n, mpi_type(send.dtype), mop, comm,
                                          next(r)),
                "MPI_Ireduce_scatter_block");
    }, divide_if_avg(op, recv, size_));
  }

  std::shared_ptr<Work> all_to_all(Buffer send, Buffer recv) override {
    const rules::Call c = call("all_to_all");
    check_host(c, send);
    check_host(c, recv);
    const std::vector<size_t> counts = rules::equal_split(c, send, recv);
    mpi_count(c, send.count);
    const int k = mpi_count(c, counts.empty() ? 0 : counts[0]);
    return submit(Op::kAllToAll, c, send.count, [=, comm = comm_->comm](Requests& r) {
      const MPI_Datatype t = mpi_type(send.dtype);
      check_mpi(MPI_Ialltoall(send.data, k, t, recv.data, k, t, comm, next(r)), "MPI_Ialltoall");
    });
  }

  std::shared_ptr<Work> all_to_all(Buffer send, std::vector<size_t> send_counts, Buffer recv,
                                   std::vector<size_t> recv_counts) override {
    const rules::Call c = call("all_to_all");
    check_host(c, send);
    check_host(c, recv);
    rules::check_all_to_all(c, send, send_counts, recv, recv_counts);
    // Kept by the operation until MPI is done with them (MPI reads them as it goes).
    auto out = std::make_shared<Layout>(layout(c, send_counts));
    auto in = std::make_shared<Layout>(layout(c, recv_counts));
    return submit(Op::kAllToAll, c, send.count, [=, comm = comm_->comm](Requests& r) {
      const MPI_Datatype t = mpi_type(send.dtype);
      check_mpi(MPI_Ialltoallv(send.data, out->counts.data(), out->displs.data(), t, recv.data,
                               in->counts.data(), in->displs.data(), t, comm, next(r)),
                "MPI_Ialltoallv");
    });
  }

  // Posted in issue order like every operation, and never waited for
  // before the next is posted: two ranks that both send first, then
  // receive, do not deadlock.
  std::shared_ptr<Work> send(Buffer buf, int dst, int tag) override {
    const rules::Call c = call("send");
    check_host(c, buf);
    rules::check_peer(c, "dst", dst);
    check_tag(c, tag);
    const int n = mpi_count(c, buf.count);
    return submit(Op::kSend, c, buf.count, [=, comm = comm_->comm](Requests& r) {
      check_mpi(MPI_Isend(buf.data, n, mpi_type(buf.dtype), dst, tag, comm, next(r)), "MPI_Isend");
    });
  }

  std::shared_ptr<Work> recv(Buffer buf, int src, int tag) override {
    const rules::Call c = call("recv");
    check_host(c, buf);
    rules::check_peer(c, "src", src);
    check_tag(c, tag);
    const int n = mpi_count(c, buf.count);
    return submit(Op::kRecv, c, buf.count, [=, comm = comm_->comm](Requests& r) {
      check_mpi(MPI_Irecv(buf.data, n, mpi_type(buf.dtype), src, tag, comm, next(r)), "MPI_Irecv");
    });
  }

  std::shared_ptr<Work> barrier() override {
    return submit(Op::kBarrier, call("barrier"), 0, [comm = comm_->comm](Requests& r) {
      check_mpi(MPI_Ibarrier(comm, next(r)), "MPI_Ibarrier");
    });
  }

  // A barrier with the deadline (a rank that never comes fails it, as any
  // operation), then MPI_Comm_split, which every rank has then reached.
  std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks) override {
    const rules::Call c = call("new_group");
    rules::check_group_ranks(c, ranks);
    int mine = -1;
    std::vector<int> global;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] == rank_) mine = int(i);
      global.push_back(global_[size_t(ranks[i])]);
    }
    auto sub = std::make_shared<MpiComm>();
    sub->timeout = comm_->timeout;
    if (mine >= 0) sub->locus = "on group " + ranks_text(global) + " rank " + std::to_string(global_[size_t(rank_)]);
    auto split = [sub, mine, comm = comm_->comm] {
      check_mpi(MPI_Comm_split(comm, mine >= 0 ? 0 : MPI_UNDEFINED, mine, &sub->comm),
                "MPI_Comm_split");
      if (sub->comm != MPI_COMM_NULL) MPI_Comm_set_errhandler(sub->comm, MPI_ERRORS_RETURN);
    };
    submit(Op::kNone, c, 0, [comm = comm_->comm](Requests& r) {
      check_mpi(MPI_Ibarrier(comm, next(r)), "MPI_Ibarrier");
    }, split)->wait();
    if (mine < 0) return nullptr;
    auto progress = std::make_shared<GroupProgress>(progress_->record());
    auto group = std::make_shared<MpiGroup>(engine_, sub, mine, global, progress);
    progress->open(subgroup_id(global), uint32_t(global.size()));
    return group;
  }

 private:
  rules::Call call(const char* op) const { return {op, comm_->locus, rank_, size_}; }

  static void check_host(const rules::Call& c, const Buffer& b) {
    if (b.device != DeviceType::kHost) {
      throw NotSupportedError(c.where() + ": an mpi group takes host buffers; copy CUDA buffers "
                              "to the host, or pass them to an auto (the default) or nccl group");
    }
    rules::check_buffer(c, b, DeviceType::kHost);
  }

  void check_tag(const rules::Call& c, int tag) const {
    rules::check_tag(c, tag);
    if (tag > engine_->tag_ub()) {
      throw Error(c.where() + ": tag " + std::to_string(tag) + " is above MPI's largest, " +
                  std::to_string(engine_->tag_ub()));
    }
  }

  // Queues the operation; records the call (`what`, `count` elements;
  // kNone: not recorded) in the group's progress slot, in queue order.
  std::shared_ptr<Work> submit(Op what, const rules::Call& c, size_t count, Start start,
                               std::function<void()> finish = {}) {
    auto op = std::make_unique<MpiOp>();
    op->comm = comm_;
    op->name = c.op;
    op->work = std::make_shared<HostWork>();
    op->start = std::move(start);
    op->finish = std::move(finish);
    std::shared_ptr<Work> work = op->work;
    std::lock_guard lock(mu_);  // one order for the record and the engine's queue
    if (what != Op::kNone) op->ticket = progress_->issue(what, count);
    engine_->submit(std::move(op));
    return work;
  }

  std::shared_ptr<MpiEngine> engine_;
  std::shared_ptr<MpiComm> comm_;
  int rank_, size_;
  std::vector<int> global_;                  // the job rank of each member
  std::shared_ptr<GroupProgress> progress_;  // issue() under mu_
  std::mutex mu_;
};

std::string world_mismatch(int rank, int size, const MpiEngine& e) {
  std::string s = "init_process_group: backend \"mpi\": MPI's world is rank " +
                  std::to_string(e.world_rank()) + " of " + std::to_string(e.world_size()) +
                  ", but this group was asked for rank " + std::to_string(rank) + " of " +
                  std::to_string(size) + " (RANK, WORLD_SIZE); start every rank under one MPI "
                  "process manager, with `ccrun --mpi` or `mpiexec -n " + std::to_string(size) +
                  "`, so that MPI_COMM_WORLD is the job";
  if (e.world_size() == 1) s += " (a world of one: this process was started without one)";
  return s;
}

// The world group (mpi_group.h, make_mpi_group).
std::unique_ptr<ProcessGroup> make_world_group(int rank, int size, milliseconds timeout,
                                               std::shared_ptr<GroupProgress> progress) {
  std::shared_ptr<MpiEngine> engine = MpiEngine::get();
  if ((rank >= 0 && rank != engine->world_rank()) || (size >= 0 && size != engine->world_size())) {
    throw ConfigError(world_mismatch(rank, size, *engine));
  }
  std::vector<int> global(size_t(engine->world_size()));
  for (size_t i = 0; i < global.size(); ++i) global[i] = int(i);
  auto comm = std::make_shared<MpiComm>();
  comm->timeout = timeout;
  comm->locus = "on group " + ranks_text(global) + " rank " + std::to_string(engine->world_rank());
  // The group's own communicator: its messages never meet the program's.
  auto op = std::make_unique<MpiOp>();
  op->comm = comm;
  op->name = "init_process_group";
  op->work = std::make_shared<HostWork>();
  op->start = [comm](Requests& r) {
    check_mpi(MPI_Comm_idup(MPI_COMM_WORLD, &comm->comm, next(r)), "MPI_Comm_idup");
  };
  op->finish = [comm] { MPI_Comm_set_errhandler(comm->comm, MPI_ERRORS_RETURN); };
  std::shared_ptr<HostWork> work = op->work;
  engine->submit(std::move(op));
  work->wait();
  return std::make_unique<MpiGroup>(engine, comm, engine->world_rank(), std::move(global),
                                    std::move(progress));
}

}  // namespace
}  // namespace ccrun::collectives

// The module's entry point (mpi_group.h, kMakeMpiGroupSymbol): a new group,
// which the caller owns and deletes through ProcessGroup's virtual destructor.
extern "C" __attribute__((visibility("default"))) ccrun::ProcessGroup*
ccrun_mpi_group(const ccrun::collectives::MpiGroupArgs* a) {
  return ccrun::collectives::make_world_group(a->rank, a->size, a->timeout, a->progress).release();
}
