//===- ccrun/progress.h - A worker's progress, readable by its agent -*- C++ -*-===//
//
// Every worker ccrun starts gets one page of shared memory, its progress
// record, named by CCRUN_PROGRESS_FILE (a file under /dev/shm that the agent
// creates and maps). Whatever runs in the worker writes its progress there
// with plain stores; the agent reads the page whenever it looks, with no
// system call and no work on the worker's side. That is what lets the agent
// say which rank a hung job waits for (docs/hangs.md).
//
// Writers, all optional:
//   - ccrun's collectives: every process group records each call (sequence
//     number, op, element count, issued/completed, times) in a group slot;
//   - the Python start-up hook the agent arranges for Python workers: the same
//     for torch.distributed's collectives, with no change to the script;
//   - the PMPI library the agent preloads into --mpi workers: the same for an
//     MPI program's calls, with no change to the program (docs/mpi.md);
//   - any program: ccrun::progress::step() below marks one training step;
//     Python without any library writes the same field through mmap, and a
//     shell script runs `touch "$CCRUN_PROGRESS_FILE"` (the agent counts a
//     new modification time as a step).
//
//   for (int s = 0; s < steps; ++s) {
//     train_one_step();
//     ccrun::progress::step();   // ~2 ns; nothing happens outside ccrun
//   }
//
// Layout (version 1): little-endian, 4096 bytes, every field naturally
// aligned and written with relaxed atomic stores; times are
// CLOCK_MONOTONIC_COARSE nanoseconds, comparable by every process of one
// machine. The layout only grows: a reader checks magic and version, a
// writer that finds another magic writes nothing.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace ccrun::progress {

inline constexpr const char* kFileVar = "CCRUN_PROGRESS_FILE";  // the record's path
inline constexpr uint64_t kMagic = 0x3152505255524343ull;        // "CCRURPR1" little-endian
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kRecordBytes = 4096;
inline constexpr int kMaxGroups = 48;  // groups past this are not recorded

// What a group slot's last call was. The numbers are part of the layout
// (the Python hook writes them too); names in op_name().
enum class Op : uint32_t {
  kNone = 0, kAllReduce, kBroadcast, kReduce, kAllGather, kGather, kScatter,
  kReduceScatter, kAllToAll, kSend, kRecv, kBarrier, kOther,
  kDdpStep,  // one DistributedDataParallel step: its gradient all-reduces run in
             // torch's C++ reducer, out of the hook's reach (issued at forward,
             // completed when its backward ended; a step with no backward is never
             // completed, so a reader takes completed as at least issued - 1;
             // wait_us: the backward's tail, the reducer waiting for its last
             // all-reduces)
};

inline const char* op_name(uint32_t op) {
  static constexpr const char* kNames[] = {
      "none", "all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter",
      "reduce_scatter", "all_to_all", "send", "recv", "barrier", "other", "DDP step"};
  return op < sizeof kNames / sizeof *kNames ? kNames[op] : "other";
}

// Who writes a group slot (a rank may have ccrun's and torch's groups both;
// kMpi: the PMPI library --mpi workers get, one slot per communicator).
enum class Source : uint32_t { kNone = 0, kCcrunCollectives = 1, kTorch = 2, kMpi = 3 };

// One process group of this worker, 64 bytes. `id` is the same on every
// member of the group (0: the world group; else a hash of its global ranks),
// so the agent can line the members' sequence numbers up. Sequence numbers
// count this group's calls from 1; completion follows issue order.
struct GroupSlot {
  std::atomic<uint64_t> id;            // 0 with size 0: slot unused
  std::atomic<uint32_t> size;          // members
  std::atomic<uint32_t> source;        // Source
  std::atomic<uint64_t> issued;        // sequence number of the last call issued
  std::atomic<uint64_t> completed;     // sequence number of the last call completed
  std::atomic<uint32_t> op;            // Op of the last call issued
  std::atomic<uint32_t> wait_us;       // total time from issue to completion of this
                                       // group's calls, in µs, wrapping at 2^32 (a
                                       // reader takes differences): what is left of
                                       // a step is the rank's own work
  std::atomic<uint64_t> count;         // elements of the last call issued
  std::atomic<int64_t> issued_ns;      // when the last call was issued
  std::atomic<int64_t> completed_ns;   // when the last call completed
};
static_assert(sizeof(GroupSlot) == 64);

// When a worker reached each phase of its start-up, in CLOCK_MONOTONIC
// nanoseconds (precise, unlike the record's other times: phases are
// milliseconds apart); 0 = not reached, or nothing writes that phase. Each
// field is written once, by the first writer to get there. The agent adds
// the time it spawned the worker and prints the timeline (docs/startup.md).
enum class Phase : uint32_t {
  kInterpreter = 0,  // the program runs: the Python hook, or the fork of a warm start
  kImports,          // torch imported (a warm start's workers: the fork)
  kGroup,            // a process group formed (init_process_group, ccrun's collectives)
  kCollective,       // the first collective completed
  kStep,             // the first step (step(), a DDP forward)
};
inline constexpr int kPhases = 5;
inline constexpr uint32_t kStartedWarm = 1;  // Startup::flags: forked from a warm template

struct Startup {
  std::atomic<int64_t> at_ns[kPhases];  // by Phase
  std::atomic<uint32_t> flags;          // kStartedWarm
  uint32_t reserved0;
  int64_t reserved1[2];
};
static_assert(sizeof(Startup) == 64);

// How many calls of each op a group has issued, for the first kOpCountGroups
// slots: with them a verdict on a desync says which calls a rank made fewer
// or more of than its peers ("rank 2 made one all_reduce fewer: 59 against
// 60"), where op and sequence number alone show only where the calls part.
// Counted ops: kAllReduce..kOther (op - 1 indexes them); a DDP slot counts
// none. Each counter wraps at 2^32 and is written by its slot's writer.
inline constexpr int kOpCountGroups = 16;
inline constexpr int kCountedOps = int(Op::kOther);  // 12: ops 1..12
inline bool counted_op(uint32_t op) { return op >= 1 && op <= uint32_t(kCountedOps); }

// Aligned to its size: a mapping is page-aligned, and so is every other
// record, so the record holding a slot is found from the slot's address.
struct alignas(kRecordBytes) Record {
  uint64_t magic;                      // kMagic, written by the agent
  uint32_t version;                    // kVersion
  uint32_t record_bytes;               // kRecordBytes
  std::atomic<int32_t> pid;            // the writer's pid (set by the first writer)
  std::atomic<int32_t> dump_signal;    // >0: this signal dumps every thread's Python
                                       // traceback (set by the Python hook)
  std::atomic<uint64_t> steps;         // steps marked by step(); a rank's steps are
                                       // these plus its DDP slots' issued (the
                                       // Python hook writes a DDP step only there)
  std::atomic<int64_t> step_ns;        // when the last step was marked
  std::atomic<uint32_t> groups_used;   // slots handed out (may exceed kMaxGroups)
  uint32_t reserved0;
  uint64_t reserved1[2];               // header: 64 bytes
  GroupSlot groups[kMaxGroups];
  Startup startup;                     // at 64 + 48 * 64 = 3136
  // [slot][op - 1]: calls issued, for slots 0..kOpCountGroups-1 (at 3200)
  std::atomic<uint32_t> op_calls[kOpCountGroups][kCountedOps];
  uint8_t tail[kRecordBytes - 64 - kMaxGroups * sizeof(GroupSlot) - sizeof(Startup) -
               kOpCountGroups * kCountedOps * sizeof(uint32_t)];
};
static_assert(sizeof(Record) == kRecordBytes);

static_assert(offsetof(Record, startup) == 3136);
static_assert(offsetof(Record, op_calls) == 3200);

// CLOCK_MONOTONIC_COARSE, in ns: a few ns to read, ticks of 1-4 ms.
inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// This process's record, mapped at the first call; null when the process
// was not started by ccrun (no CCRUN_PROGRESS_FILE) or the file is not a
// record. Thread-safe; the mapping lives as long as the process.
inline Record* record() {
  static Record* const mapped = [] () -> Record* {
    const char* path = std::getenv(kFileVar);
    if (!path || !*path) return nullptr;
    int fd = ::open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return nullptr;
    // A shorter file (empty, or not a record) maps, but reading past its
    // end is SIGBUS: take it as no record.
    struct stat st;
    if (::fstat(fd, &st) != 0 || st.st_size < off_t(kRecordBytes)) {
      ::close(fd);
      return nullptr;
    }
    void* p = ::mmap(nullptr, kRecordBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return nullptr;
    auto* r = static_cast<Record*>(p);
    if (r->magic != kMagic || r->version < kVersion) {
      ::munmap(p, kRecordBytes);
      return nullptr;
    }
    // The first live writer owns the record (the Python hook's rule too):
    // a process it starts later (a DataLoader worker) leaves it alone.
    int32_t owner = r->pid.load(std::memory_order_relaxed);
    if (owner == 0 || owner == ::getpid() || (::kill(owner, 0) != 0 && errno == ESRCH)) {
      r->pid.store(int32_t(::getpid()), std::memory_order_relaxed);
    }
    return r;
  }();
  return mapped;
}

// CLOCK_MONOTONIC, in ns: the start-up timeline's clock.
inline int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Records that this worker reached `phase` now, unless it did before.
inline void mark(Record& r, Phase phase) {
  auto& at = r.startup.at_ns[uint32_t(phase)];
  if (at.load(std::memory_order_relaxed) == 0) at.store(monotonic_ns(), std::memory_order_relaxed);
}

// Marks one step of this worker (a training iteration, a batch): `ccrun
// status` shows steps per second, and a rank whose steps stop while others
// go on is named. Costs two relaxed stores once the record is mapped.
inline void step() {
  if (Record* r = record()) {
    int64_t now = now_ns();
    if (r->steps.fetch_add(1, std::memory_order_relaxed) == 0) mark(*r, Phase::kStep);
    r->step_ns.store(now, std::memory_order_relaxed);
  }
}

}  // namespace ccrun::progress
