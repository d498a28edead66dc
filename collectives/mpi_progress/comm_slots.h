//===- comm_slots.h - One progress slot per MPI communicator -*- C++ -*-===//
//
// The PMPI library (mpi_wrappers.cpp) records each MPI call in the slot of
// its communicator, in the worker's progress record (ccrun/progress.h),
// through the same writer as ccrun's own collectives (progress_writer.h).
// A communicator gets its slot at its first recorded call:
//
//   const GroupProgress* p = progress_of(comm);   // null: not recorded
//   ProgressTicket t = p ? p->issue(progress::Op::kAllReduce, count) : ProgressTicket{};
//   int rc = PMPI_Allreduce(...);
//   t.complete();
//
// Slot ids are the same on every member, so the agent lines the members'
// sequence numbers up: MPI_COMM_WORLD is the world group (id 0); any other
// intracommunicator of two ranks or more is subgroup_id() of its members'
// world ranks, mixed with how many communicators of the same members this
// process recorded before it (MPI_Comm_dup's copies of one group; members
// agree on it when they use such copies first in the same order).
// Intercommunicators and communicators of one rank are not recorded.
//
// Outside ccrun (no CCRUN_PROGRESS_FILE) progress_of() is one branch and
// returns null: every call passes straight through.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <mpi.h>

#include "progress_writer.h"

namespace ccrun::collectives::mpi_progress {

// How many communicators get a slot (the record holds kMaxGroups in all).
inline constexpr int kMaxComms = progress::kMaxGroups;

// The writer of `comm`'s slot, opening it at the first call; null when
// this process has no record, `comm` is not recorded, or the slots are
// handed out. Thread-safe. Call only between MPI_Init and MPI_Finalize.
const GroupProgress* progress_of(MPI_Comm comm);

// Forgets `comm` (before MPI_Comm_free: MPI may hand its handle out again
// for another communicator, which then gets a slot of its own).
void forget(MPI_Comm comm);

// The PMPI_ function `name` of the MPI library loaded after this one
// (dlsym RTLD_NEXT): the library needs no link to libmpi, so a process
// without MPI (a shell script the worker runs first) loads it at no cost.
// Aborts with a message when the process has no such function.
void* next_symbol(const char* name);

// next_symbol(name) as the function type F: pmpi<decltype(&PMPI_Send)>("PMPI_Send").
template <typename F>
F pmpi(const char* name) {
  return reinterpret_cast<F>(next_symbol(name));
}

}  // namespace ccrun::collectives::mpi_progress
