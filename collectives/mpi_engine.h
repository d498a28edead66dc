//===- mpi_engine.h - The one thread that calls MPI -------------*- C++ -*-===//
//
// The MPI backend (mpi_group.h) calls MPI from one thread of the process,
// this engine's, as torch's ProcessGroupMPI does from its worker: MPI is
// initialised on it (MPI_Init_thread asking for MPI_THREAD_SERIALIZED; the
// funnelled level is enough, since no other thread calls MPI), so a
// library level that only allows one calling thread serves a program with
// many. Every group of the process queues its operations here.
//
// An operation (MpiOp) posts non-blocking MPI calls (MPI_Iallreduce, ...)
// and returns at once; the engine then tests every operation in flight, in
// a loop that spins while any is (MPI's progress needs the calls: MPI_Wait
// spins too), so sends and receives between two ranks never wait for each
// other's turn in a queue. An operation still in flight at its deadline
// fails with TimeoutError and breaks its group: its requests are abandoned,
// not freed (MPI cannot cancel a collective), and the engine keeps what
// they point into until the process ends.
//
//   auto engine = MpiEngine::get();        // MPI_Init_thread, once
//   auto op = std::make_unique<MpiOp>();
//   op->comm = comm;                       // its group's communicator
//   op->start = [=](Requests& r) { r.emplace_back(); MPI_Ibarrier(c, &r.back()); };
//   engine->submit(std::move(op));         // op->work finishes when done
//
//===----------------------------------------------------------------------===//
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ccrun/collectives.h"
#include "host_work.h"
#include "progress_writer.h"

namespace ccrun::collectives {

using Requests = std::vector<MPI_Request>;

// MPI's words for error code `rc` ("Message truncated, ...").
std::string mpi_error_text(int rc);
// Throws Error("<call>: <MPI's words>") unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* call);

// One group's communicator, shared by the group and its operations in flight.
struct MpiComm {
  MPI_Comm comm = MPI_COMM_NULL;  // written by the engine (dup, split), then read there only
  std::string locus;              // "on group [0,1] rank 1", for errors
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  std::string broken;             // engine thread only: why the group failed; empty: healthy
};

// One operation of a group, run by the engine.
struct MpiOp {
  std::shared_ptr<MpiComm> comm;
  const char* name = "";               // "all_reduce", for errors
  std::shared_ptr<HostWork> work;      // finished once; null: nobody waits (a comm's free)
  ProgressTicket ticket;               // completed when the operation succeeds
  // Posts the operation's non-blocking calls, appending their requests
  // (none: done at once). May throw Error. What it captures lives until
  // the requests complete (or the process ends, if they never do).
  std::function<void(Requests&)> start;
  // Once every request completed (Avg's division, a split). May be empty; may throw.
  std::function<void()> finish;
  // The engine's.
  Requests requests;
  std::chrono::steady_clock::time_point deadline;
};

class MpiEngine {
 public:
  // The process's engine, started at the first call: its thread runs
  // MPI_Init_thread (blocking until the process manager answers). Throws
  // Error when MPI cannot start, or when the program initialised MPI itself
  // below MPI_THREAD_MULTIPLE. The engine ends (MPI_Finalize, if it
  // initialised MPI) when the process exits and no group is left.
  static std::shared_ptr<MpiEngine> get();

  MpiEngine(const MpiEngine&) = delete;  // owns a thread and MPI's state
  MpiEngine& operator=(const MpiEngine&) = delete;
  ~MpiEngine();

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int tag_ub() const { return tag_ub_; }  // the largest message tag MPI takes

  // Queues `op`; returns at once. Operations are posted in submit order.
  void submit(std::unique_ptr<MpiOp> op);

  // The MPI_Op that reduces `dtype` with `op` (kAvg: sum). float16 and
  // bfloat16 have no MPI type: they travel as MPI_UINT16_T and reduce with
  // MPI_Ops made here over ccrun's own functions (reduce_functions.h,
  // computing in float), so they reduce as the Gloo group's do.
  MPI_Op reduce_op(DataType dtype, ReduceOp op) const;

 private:
  MpiEngine() = default;
  void run(std::promise<void>& started);
  void start_mpi();
  void stop_mpi();
  void post_queued();
  bool test_in_flight();
  void end(MpiOp& op, std::exception_ptr error);
  void fail_group(MpiComm& comm, const std::string& why);

  int world_rank_ = 0, world_size_ = 1, tag_ub_ = 32767;
  bool own_mpi_ = false;   // MPI_Init_thread was ours: MPI_Finalize is too
  MPI_Op half_ops_[2][4];  // [bfloat16?][sum, prod, min, max]: made by start_mpi

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<MpiOp>> queue_;  // guarded by mu_
  std::atomic<size_t> queued_{0};             // queue_.size(), read without mu_
  bool stopping_ = false;                     // guarded by mu_
  std::vector<std::unique_ptr<MpiOp>> in_flight_;  // engine thread only
  std::vector<std::unique_ptr<MpiOp>> abandoned_;  // engine thread only: timed out, never freed
  std::thread thread_;
};

}  // namespace ccrun::collectives
