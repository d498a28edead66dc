//===- mpi_group.h - The MPI backend, through the mpi_group module -*- C++ -*-===//
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
// The group (mpi_group.cpp, mpi_engine.cpp) lives in the module
// libccrun_mpi_group.so (module_loader.h), the only part of ccrun that links
// MPI: make_mpi_group, in the collectives library, loads it the first time a
// process asks for backend "mpi", so that no other program maps libmpich
// (and `ccrun` need not be given --mpi to start one). Across the module's
// edge only the ProcessGroup interface and MpiGroupArgs pass.
//
//   auto pg = make_mpi_group(-1, -1, std::chrono::minutes(1), progress);  // MPI's rank and size
//   pg->all_reduce({grad.data(), grad.size(), DataType::kFloat32}, ReduceOp::kAvg)->wait();
//
// Builds without MPI (CCRUN_WITH_MPI=OFF, or none found) have no module,
// and a make_mpi_group that throws NotSupportedError with what to install.
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
// one); -1 takes MPI's. Blocks in MPI's start-up at the first group. Throws
// ccrun::Error naming the paths tried and the fix when the module cannot be
// loaded, NotSupportedError in builds without MPI.
std::shared_ptr<ProcessGroup> make_mpi_group(int rank, int size, std::chrono::milliseconds timeout,
                                             std::shared_ptr<GroupProgress> progress);

// make_mpi_group's arguments, as the module's entry point takes them.
struct MpiGroupArgs {
  int rank = -1, size = -1;
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  std::shared_ptr<GroupProgress> progress;
};

// The module's entry point (extern "C", found by name): a new world group,
// owned by the caller. Throws as make_mpi_group does.
using MakeMpiGroup = ProcessGroup* (*)(const MpiGroupArgs*);
inline constexpr const char* kMakeMpiGroupSymbol = "ccrun_mpi_group";

}  // namespace ccrun::collectives
