//===- mpi_program.h - Which MPI a program links, before it is launched -*- C++ -*-===//
//
// An MPI program started without a process manager that its MPI can talk
// to does not fail: MPI_Init makes a world of one, and N ranks train as N
// separate jobs, silently. So ccrun looks at the program before it runs it:
// the shared libraries its ELF file names (DT_NEEDED) tell its MPI, and
//   - an MPICH-family MPI (MPICH, Intel MPI, MVAPICH: libmpi.so.12,
//     libmpich.so) without --mpi is refused, the message naming --mpi;
//   - Open MPI (libmpi.so.40 and its kin), which takes its world from PMIx
//     and not from the PMI-1 that --mpi serves, is refused either way,
//     naming what to do instead.
// A world of one rank is left alone (one rank is one world), and so is what
// this cannot see: a Python program (mpi4py loads MPI at run time), a
// program started through a shell, one that loads MPI with dlopen, or a
// program not on this machine (each node's ccrun checks its own). docs/mpi.md.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

#include "ccrun/job_spec.h"

namespace ccrun::launcher {

enum class MpiFamily { kNone, kMpich, kOpenMpi };

struct MpiLink {
  MpiFamily family = MpiFamily::kNone;
  std::string library;  // the library that told, e.g. "libmpi.so.12"
};

// The MPI that a program's needed libraries name. Pure.
[[nodiscard]] MpiLink mpi_of_libraries(const std::vector<std::string>& needed);

// The DT_NEEDED names of the ELF file at `path` (64-bit); empty for a file
// that is not one, or cannot be read.
[[nodiscard]] std::vector<std::string> elf_needed_libraries(const std::string& path);

// "" when `spec` may run as it is; else why not, and the fix.
[[nodiscard]] std::string mpi_program_problem(const JobSpec& spec);

}  // namespace ccrun::launcher
