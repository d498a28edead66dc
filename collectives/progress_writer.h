//===- progress_writer.h - A process group's calls, in the progress record -*- C++ -*-===//
//
// Every process group of ccrun's collectives records its calls in a slot of
// the worker's progress record (include/ccrun/progress.h), so the agent can
// tell, for a hung job, which rank has not issued or not finished which
// call. A GroupProgress is one group's writer:
//
//   auto progress = std::make_shared<GroupProgress>();  // this process's record
//   progress->open(kWorldGroupId, size);                // before the first call
//   ProgressTicket t = progress->issue(progress::Op::kAllReduce, buf.count);
//   ...                                                 // the operation runs
//   t.complete();                                       // where its Work is done
//
// Without a record (a process ccrun did not start), or once the record's
// kMaxGroups slots are handed out, every member is a no-op costing one
// branch. With one, issue() is five relaxed stores and a coarse clock read,
// complete() two stores and one read: no lock, no locked instruction.
//
// Writers: issue() on the group's issuing thread (one at a time: ranks agree
// on a group's order of calls, so a program issues them from one thread, or
// under the group's own lock as the Gloo group does); complete() where a
// call's Work becomes done. The default group (dispatch_group.cpp) shares
// one GroupProgress between its Gloo and NCCL halves: each user call is
// recorded once, and `completed` is the newest call completed by either.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <vector>

#include "ccrun/progress.h"

namespace ccrun::collectives {

// The slot id of the world (default) group on every rank.
inline constexpr uint64_t kWorldGroupId = 0;

// The slot id of the subgroup of these job ranks, in this order: FNV-1a over
// their 32-bit little-endian values, never kWorldGroupId. Every member
// computes the same id.
uint64_t subgroup_id(const std::vector<int>& global_ranks);

// One issued call: what complete() needs. Copyable, 16 bytes; a default one
// (not recorded) completes nothing.
struct ProgressTicket {
  progress::GroupSlot* slot = nullptr;
  uint64_t seq = 0;

  // Records that the call is done: wait_us grows by the time since the
  // last issue (this call's, unless calls overlap), completed_ns, then
  // completed = seq (release). Completions that arrive out of order never
  // move `completed` back; two threads completing calls of one group at the
  // same moment may (the next completion moves it on).
  void complete() const noexcept {
    if (!slot || seq <= slot->completed.load(std::memory_order_relaxed)) return;
    int64_t now = progress::now_ns();
    int64_t waited = now - slot->issued_ns.load(std::memory_order_relaxed);
    slot->wait_us.store(slot->wait_us.load(std::memory_order_relaxed) +
                            uint32_t(waited > 0 ? waited / 1000 : 0),
                        std::memory_order_relaxed);
    slot->completed_ns.store(now, std::memory_order_relaxed);
    slot->completed.store(seq, std::memory_order_release);
    if (seq == 1) progress::mark(record_of(slot), progress::Phase::kCollective);
  }

  // The record holding `slot` (records are aligned to their size).
  static progress::Record& record_of(progress::GroupSlot* slot) noexcept {
    return *reinterpret_cast<progress::Record*>(reinterpret_cast<uintptr_t>(slot) &
                                                ~uintptr_t(progress::kRecordBytes - 1));
  }
};

// One process group's slot writer.
class GroupProgress {
 public:
  // Records nothing until open(); takes its slot from `record` (null:
  // records nothing at all). The default is this process's record, null
  // unless ccrun started it.
  explicit GroupProgress(progress::Record* record = progress::record()) : record_(record) {}
  GroupProgress(const GroupProgress&) = delete;  // one writer per slot
  GroupProgress& operator=(const GroupProgress&) = delete;

  // Takes the record's next slot and writes id, size and `source` into it
  // (size last, with release: a reader takes a slot with size 0 as unused).
  // Past kMaxGroups, or without a record, the group is not recorded. Call
  // once, before the group's first call.
  void open(uint64_t id, uint32_t size,
            progress::Source source = progress::Source::kCcrunCollectives);

  // The record this group's slot comes from: its subgroups take theirs there too.
  progress::Record* record() const { return record_; }
  // The slot, or null when this group is not recorded.
  progress::GroupSlot* slot() const { return slot_; }

  // Records a call being issued: op, count (elements of its main buffer),
  // the op's call count (progress::Record::op_calls), issued_ns, then
  // issued = the next sequence number (release). Returns the
  // call's ticket for complete().
  [[nodiscard]] ProgressTicket issue(progress::Op op, uint64_t count) const noexcept {
    progress::GroupSlot* s = slot_;
    if (!s) return {};
    // This writer is the slot's only issuer: its own last store is the count.
    const uint64_t seq = s->issued.load(std::memory_order_relaxed) + 1;
    s->op.store(uint32_t(op), std::memory_order_relaxed);
    s->count.store(count, std::memory_order_relaxed);
    if (op_calls_ && progress::counted_op(uint32_t(op))) {
      std::atomic<uint32_t>& calls = op_calls_[uint32_t(op) - 1];
      calls.store(calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    s->issued_ns.store(progress::now_ns(), std::memory_order_relaxed);
    s->issued.store(seq, std::memory_order_release);
    return {s, seq};
  }

 private:
  progress::Record* record_;
  progress::GroupSlot* slot_ = nullptr;  // set by open(), before any issue()
  std::atomic<uint32_t>* op_calls_ = nullptr;  // the slot's per-op counts, if it has them
};

}  // namespace ccrun::collectives
