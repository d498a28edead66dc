//===- mpi_group.h - The MPI backend ----------------------------*- C++ -*-===//
//
// CollectivesBackend::kMpi: a ProcessGroup for host buffers over the MPI
// library the job was started with (MPI_COMM_WORLD, duplicated), for
// programs whose cluster's fastest host transport is MPI's (shared memory,
// InfiniBand through UCX) and for jobs started by mpiexec or `ccrun --mpi`.
// It needs no store: MPI's process manager has already brought the ranks
// together. Every call returns at once with a Work; one engine thread per
// process calls MPI for every group (mpi_engine.h), so the calls are safe
// from any thread, as the Gloo group's are.
//
//   auto pg = make_mpi_group(-1, -1, std::chrono::minutes(1), progress);  // MPI's rank and size
//   pg->all_reduce({grad.data(), grad.size(), DataType::kFloat32}, ReduceOp::kAvg)->wait();
//
// Builds without MPI (CCRUN_WITH_MPI=OFF, or none found) have a
// make_mpi_group that throws NotSupportedError with what to install.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <memory>

#include "ccrun/collectives.h"
#include "progress_writer.h"

namespace ccrun::collectives {

// The world group over MPI_COMM_WORLD, recording its calls into `progress`
// (opened by the caller). `rank` and `size` are what the job asked for:
// each must equal MPI's (ConfigError naming both otherwise, e.g. for a
// program started without a process manager, which MPI makes a world of
// one); -1 takes MPI's. Blocks in MPI's start-up at the first group.
std::shared_ptr<ProcessGroup> make_mpi_group(int rank, int size, std::chrono::milliseconds timeout,
                                             std::shared_ptr<GroupProgress> progress);

}  // namespace ccrun::collectives
