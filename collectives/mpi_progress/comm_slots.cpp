// One progress slot per MPI communicator (see comm_slots.h).
#include "comm_slots.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <optional>
#include <string_view>
#include <vector>

#include "ccrun/fnv1a.h"

namespace ccrun::collectives::mpi_progress {
namespace {

// A communicator seen by progress_of(). Written once under Table::mu
// before it is published; only `comm` changes after (forget()).
struct Entry {
  std::atomic<MPI_Comm> comm{MPI_COMM_NULL};
  uint64_t members_id = 0;                // subgroup_id of its members; 0: the world
  std::optional<GroupProgress> progress;  // empty: not recorded
  const GroupProgress* writer = nullptr;  // &*progress when it holds a slot
};

// Entries are appended under `mu` and never move: a reader loads `used`
// (acquire) and finds every entry below it complete, with no lock.
struct Table {
  std::mutex mu;
  std::atomic<int> used{0};
  std::atomic<const GroupProgress*> world{nullptr};  // MPI_COMM_WORLD's writer
  Entry entries[kMaxComms];
};

Table& table() {
  static Table t;
  return t;
}

const Entry* find(const Table& t, MPI_Comm comm) {
  const int used = t.used.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) {
    if (t.entries[i].comm.load(std::memory_order_relaxed) == comm) return &t.entries[i];
  }
  return nullptr;
}

// The world ranks of `comm`'s members, in its rank order.
std::vector<int> world_ranks(MPI_Comm comm, int size) {
  static const auto comm_group = pmpi<decltype(&PMPI_Comm_group)>("PMPI_Comm_group");
  static const auto translate =
      pmpi<decltype(&PMPI_Group_translate_ranks)>("PMPI_Group_translate_ranks");
  static const auto group_free = pmpi<decltype(&PMPI_Group_free)>("PMPI_Group_free");
  MPI_Group group, world;
  comm_group(comm, &group);
  comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> local(static_cast<size_t>(size)), global(static_cast<size_t>(size), -1);
  std::iota(local.begin(), local.end(), 0);
  translate(group, size, local.data(), world, global.data());
  group_free(&group);
  group_free(&world);
  return global;
}

// The slot id of `comm` (its members' id, and how many communicators of the
// same members came before it here), or nothing when it is not recorded.
std::optional<uint64_t> slot_id(const Table& t, MPI_Comm comm, uint64_t& members_id, int& size) {
  static const auto comm_size = pmpi<decltype(&PMPI_Comm_size)>("PMPI_Comm_size");
  static const auto test_inter = pmpi<decltype(&PMPI_Comm_test_inter)>("PMPI_Comm_test_inter");
  int inter = 0;
  if (comm_size(comm, &size) != MPI_SUCCESS || size < 2) return std::nullopt;
  if (comm == MPI_COMM_WORLD) return kWorldGroupId;
  if (test_inter(comm, &inter) != MPI_SUCCESS || inter) return std::nullopt;
  members_id = subgroup_id(world_ranks(comm, size));
  uint32_t before = 0;
  for (int i = 0; i < t.used.load(std::memory_order_relaxed); ++i) {
    before += t.entries[i].members_id == members_id;
  }
  if (before == 0) return members_id;
  const char bytes[4] = {char(before & 0xff), char((before >> 8) & 0xff),
                         char((before >> 16) & 0xff), char(before >> 24)};
  uint64_t id = fnv1a64(std::string_view(bytes, 4), members_id);
  return id == kWorldGroupId ? 1 : id;
}

// Adds `comm` to the table, with a slot when it is recorded.
const GroupProgress* open_comm(Table& t, MPI_Comm comm) {
  std::lock_guard lock(t.mu);
  if (const Entry* e = find(t, comm)) return e->writer;  // another thread was first
  const int used = t.used.load(std::memory_order_relaxed);
  if (used >= kMaxComms) return nullptr;
  Entry& e = t.entries[used];
  int size = 0;
  if (std::optional<uint64_t> id = slot_id(t, comm, e.members_id, size)) {
    e.progress.emplace(progress::record());
    e.progress->open(*id, uint32_t(size), progress::Source::kMpi);
    if (e.progress->slot()) e.writer = &*e.progress;
  }
  e.comm.store(comm, std::memory_order_relaxed);
  t.used.store(used + 1, std::memory_order_release);
  if (comm == MPI_COMM_WORLD) t.world.store(e.writer, std::memory_order_release);
  return e.writer;
}

}  // namespace

const GroupProgress* progress_of(MPI_Comm comm) {
  if (!progress::record()) return nullptr;
  Table& t = table();
  if (comm == MPI_COMM_WORLD) {
    if (const GroupProgress* w = t.world.load(std::memory_order_acquire)) return w;
  }
  if (const Entry* e = find(t, comm)) return e->writer;
  return open_comm(t, comm);
}

void forget(MPI_Comm comm) {
  if (!progress::record() || comm == MPI_COMM_WORLD) return;
  Table& t = table();
  std::lock_guard lock(t.mu);
  for (int i = 0; i < t.used.load(std::memory_order_relaxed); ++i) {
    Entry& e = t.entries[i];
    if (e.comm.load(std::memory_order_relaxed) == comm) e.comm.store(MPI_COMM_NULL);
  }
}

void* next_symbol(const char* name) {
  void* f = ::dlsym(RTLD_NEXT, name);
  if (!f) f = ::dlsym(RTLD_DEFAULT, name);
  if (f) return f;
  std::fprintf(stderr,
               "ccrun: libccrun_mpi_progress.so: this process's MPI library has no %s; the "
               "library records MPICH-family MPI calls only (unset LD_PRELOAD to run without it)\n",
               name);
  std::abort();
}

}  // namespace ccrun::collectives::mpi_progress
