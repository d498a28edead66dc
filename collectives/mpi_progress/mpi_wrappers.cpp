//===- mpi_wrappers.cpp - MPI calls recorded in the progress record -------===//
//
// libccrun_mpi_progress.so: a PMPI interposition library that the agent
// preloads into --mpi workers (LD_PRELOAD), so an MPI program reports its
// calls as ccrun's collectives do, with no change to the program. Each
// function below calls its PMPI_ twin and records, in its communicator's
// slot (comm_slots.h), the call's op (progress::Op), element count, issue
// and completion. MPI_Init and MPI_Init_thread only open the world's slot.
//
// Element counts are the same on every member, so that a call made with
// other arguments shows: the buffer's count (all-reduce, broadcast,
// reduce), the count each rank sends (all-gather, gather, all-to-all), or
// receives (scatter, reduce-scatter block), and the sum of recvcounts for
// MPI_Reduce_scatter.
//
// Nonblocking calls (MPI_I*) and their completions (MPI_Wait*, MPI_Test*)
// are not recorded: a call recorded as issued must be recorded as
// completed wherever it completes, or the agent would take it for one that
// never returns.
//
//===----------------------------------------------------------------------===//
#include <mpi.h>

#include "comm_slots.h"

#define CCRUN_MPI_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using ccrun::collectives::GroupProgress;
using ccrun::collectives::ProgressTicket;
using ccrun::collectives::mpi_progress::pmpi;
using ccrun::collectives::mpi_progress::progress_of;
using Op = ccrun::progress::Op;

// Runs `call` (the PMPI_ twin), recorded as `op` of `count` elements in
// `comm`'s slot: issued before, completed when it returns (an error return
// too: the call is over).
template <typename Call>
int recorded(MPI_Comm comm, Op op, int count, Call call) {
  const GroupProgress* p = progress_of(comm);
  if (!p) return call();
  ProgressTicket t = p->issue(op, count > 0 ? uint64_t(count) : 0);
  int rc = call();
  t.complete();
  return rc;
}

// Opens MPI_COMM_WORLD's slot once MPI is up (a start-up phase of its own).
int started(int rc) {
  if (rc == MPI_SUCCESS) (void)progress_of(MPI_COMM_WORLD);
  return rc;
}

}  // namespace

CCRUN_MPI_EXPORT int MPI_Init(int* argc, char*** argv) {
  static const auto f = pmpi<decltype(&PMPI_Init)>("PMPI_Init");
  return started(f(argc, argv));
}

CCRUN_MPI_EXPORT int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  static const auto f = pmpi<decltype(&PMPI_Init_thread)>("PMPI_Init_thread");
  return started(f(argc, argv, required, provided));
}

CCRUN_MPI_EXPORT int MPI_Comm_free(MPI_Comm* comm) {
  static const auto f = pmpi<decltype(&PMPI_Comm_free)>("PMPI_Comm_free");
  if (comm) ccrun::collectives::mpi_progress::forget(*comm);
  return f(comm);
}

CCRUN_MPI_EXPORT int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count,
                                   MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  static const auto f = pmpi<decltype(&PMPI_Allreduce)>("PMPI_Allreduce");
  return recorded(comm, Op::kAllReduce, count,
                  [&] { return f(sendbuf, recvbuf, count, datatype, op, comm); });
}

CCRUN_MPI_EXPORT int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root,
                               MPI_Comm comm) {
  static const auto f = pmpi<decltype(&PMPI_Bcast)>("PMPI_Bcast");
  return recorded(comm, Op::kBroadcast, count,
                  [&] { return f(buffer, count, datatype, root, comm); });
}

CCRUN_MPI_EXPORT int MPI_Reduce(const void* sendbuf, void* recvbuf, int count,
                                MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm) {
  static const auto f = pmpi<decltype(&PMPI_Reduce)>("PMPI_Reduce");
  return recorded(comm, Op::kReduce, count,
                  [&] { return f(sendbuf, recvbuf, count, datatype, op, root, comm); });
}

CCRUN_MPI_EXPORT int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                   void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                   MPI_Comm comm) {
  static const auto f = pmpi<decltype(&PMPI_Allgather)>("PMPI_Allgather");
  return recorded(comm, Op::kAllGather, sendcount, [&] {
    return f(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  });
}

CCRUN_MPI_EXPORT int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                                MPI_Comm comm) {
  static const auto f = pmpi<decltype(&PMPI_Gather)>("PMPI_Gather");
  return recorded(comm, Op::kGather, sendcount, [&] {
    return f(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  });
}

CCRUN_MPI_EXPORT int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                 void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                                 MPI_Comm comm) {
  static const auto f = pmpi<decltype(&PMPI_Scatter)>("PMPI_Scatter");
  return recorded(comm, Op::kScatter, recvcount, [&] {
    return f(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  });
}

CCRUN_MPI_EXPORT int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[],
                                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  static const auto f = pmpi<decltype(&PMPI_Reduce_scatter)>("PMPI_Reduce_scatter");
  static const auto comm_size = pmpi<decltype(&PMPI_Comm_size)>("PMPI_Comm_size");
  int size = 0, total = 0;
  if (progress_of(comm) && recvcounts && comm_size(comm, &size) == MPI_SUCCESS) {
    for (int i = 0; i < size; ++i) total += recvcounts[i];
  }
  return recorded(comm, Op::kReduceScatter, total,
                  [&] { return f(sendbuf, recvbuf, recvcounts, datatype, op, comm); });
}

CCRUN_MPI_EXPORT int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  static const auto f = pmpi<decltype(&PMPI_Reduce_scatter_block)>("PMPI_Reduce_scatter_block");
  return recorded(comm, Op::kReduceScatter, recvcount,
                  [&] { return f(sendbuf, recvbuf, recvcount, datatype, op, comm); });
}

CCRUN_MPI_EXPORT int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                  void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                  MPI_Comm comm) {
  static const auto f = pmpi<decltype(&PMPI_Alltoall)>("PMPI_Alltoall");
  return recorded(comm, Op::kAllToAll, sendcount, [&] {
    return f(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  });
}

CCRUN_MPI_EXPORT int MPI_Barrier(MPI_Comm comm) {
  static const auto f = pmpi<decltype(&PMPI_Barrier)>("PMPI_Barrier");
  return recorded(comm, Op::kBarrier, 0, [&] { return f(comm); });
}

CCRUN_MPI_EXPORT int MPI_Send(const void* buf, int count, MPI_Datatype datatype, int dest, int tag,
                              MPI_Comm comm) {
  static const auto f = pmpi<decltype(&PMPI_Send)>("PMPI_Send");
  return recorded(comm, Op::kSend, count, [&] { return f(buf, count, datatype, dest, tag, comm); });
}

CCRUN_MPI_EXPORT int MPI_Recv(void* buf, int count, MPI_Datatype datatype, int source, int tag,
                              MPI_Comm comm, MPI_Status* status) {
  static const auto f = pmpi<decltype(&PMPI_Recv)>("PMPI_Recv");
  return recorded(comm, Op::kRecv, count,
                  [&] { return f(buf, count, datatype, source, tag, comm, status); });
}
