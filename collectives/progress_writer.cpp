// A process group's calls in the progress record (see progress_writer.h).
#include "progress_writer.h"

namespace ccrun::collectives {

uint64_t subgroup_id(const std::vector<int>& global_ranks) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64-bit
  for (int r : global_ranks) {
    const uint32_t v = uint32_t(r);
    for (int byte = 0; byte < 4; ++byte) {
      h ^= (v >> (8 * byte)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return h == kWorldGroupId ? 1 : h;
}

void GroupProgress::open(uint64_t id, uint32_t size) {
  if (!record_ || slot_) return;
  const uint32_t index = record_->groups_used.fetch_add(1, std::memory_order_relaxed);
  if (index >= uint32_t(progress::kMaxGroups)) return;
  progress::GroupSlot& s = record_->groups[index];
  s.id.store(id, std::memory_order_relaxed);
  s.source.store(uint32_t(progress::Source::kCcrunCollectives), std::memory_order_relaxed);
  if (index < uint32_t(progress::kOpCountGroups)) {
    op_calls_ = record_->op_calls[index];
    for (int op = 0; op < progress::kCountedOps; ++op) {
      op_calls_[op].store(0, std::memory_order_relaxed);
    }
  }
  s.size.store(size, std::memory_order_release);
  slot_ = &s;
  if (id == kWorldGroupId) progress::mark(*record_, progress::Phase::kGroup);
}

}  // namespace ccrun::collectives
