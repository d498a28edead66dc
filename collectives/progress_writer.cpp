// A process group's calls in the progress record (see progress_writer.h).
#include "progress_writer.h"

#include <string_view>

#include "ccrun/fnv1a.h"

namespace ccrun::collectives {

uint64_t subgroup_id(const std::vector<int>& global_ranks) {
  uint64_t h = kFnv1a64Offset;
  for (int r : global_ranks) {  // each rank's 4 bytes, little-endian
    const uint32_t v = uint32_t(r);
    const char bytes[4] = {char(v & 0xff), char((v >> 8) & 0xff), char((v >> 16) & 0xff), char(v >> 24)};
    h = fnv1a64(std::string_view(bytes, 4), h);
  }
  return h == kWorldGroupId ? 1 : h;
}

void GroupProgress::open(uint64_t id, uint32_t size, progress::Source source) {
  if (!record_ || slot_) return;
  const uint32_t index = record_->groups_used.fetch_add(1, std::memory_order_relaxed);
  if (index >= uint32_t(progress::kMaxGroups)) return;
  progress::GroupSlot& s = record_->groups[index];
  s.id.store(id, std::memory_order_relaxed);
  s.source.store(uint32_t(source), std::memory_order_relaxed);
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
