// The agent's reading of a progress record's group slots (see progress_read.h).
#include "progress_read.h"

#include <algorithm>

namespace ccrun::agent {

GroupsRead read_groups(const progress::Record& r, int64_t now, std::vector<GroupView>& groups) {
  GroupsRead read{r.step_ns.load(std::memory_order_relaxed)};
  const uint32_t used = r.groups_used.load(std::memory_order_acquire);
  const uint32_t n = std::min<uint32_t>(used, progress::kMaxGroups);
  read.unrecorded = used - n;
  for (uint32_t i = 0; i < n; ++i) {
    const auto& s = r.groups[i];
    GroupView g;
    g.size = s.size.load(std::memory_order_relaxed);
    if (g.size == 0) continue;  // being set up
    g.id = s.id.load(std::memory_order_relaxed);
    g.completed = s.completed.load(std::memory_order_acquire);
    g.issued = s.issued.load(std::memory_order_acquire);
    g.op = s.op.load(std::memory_order_relaxed);
    g.count = s.count.load(std::memory_order_relaxed);
    int64_t issued_ns = s.issued_ns.load(std::memory_order_relaxed);
    read.last_ns =
        std::max({read.last_ns, issued_ns, s.completed_ns.load(std::memory_order_relaxed)});
    if (g.issued > g.completed) g.waiting_ms = std::max<int64_t>(0, (now - issued_ns) / 1'000'000);
    if (g.op == uint32_t(progress::Op::kDdpStep)) {
      // A DDP step whose backward never ended (or never reached the hook) is done once the
      // module's next step is issued: the hook writes no completion for it.
      if (g.issued > g.completed + 1) g.completed = g.issued - 1;
      read.ddp_steps += g.issued;
    }
    if (i < uint32_t(progress::kOpCountGroups)) {
      for (int op = 0; op < progress::kCountedOps; ++op) {
        g.op_calls[op] = r.op_calls[i][op].load(std::memory_order_relaxed);
      }
    }
    read.most_calls = std::max(read.most_calls, g.completed);
    read.wait_us += s.wait_us.load(std::memory_order_relaxed);
    groups.push_back(g);
  }
  return read;
}

}  // namespace ccrun::agent
