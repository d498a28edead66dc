// The hang decision and the straggler rule (see hang_verdict.h).
#include "hang_verdict.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "ccrun/error.h"
#include "ccrun/progress.h"

namespace ccrun::agent {
namespace {

using json = nlohmann::json;

bool is_ddp(const GroupView& g) { return g.op == uint32_t(progress::Op::kDdpStep); }

std::string group_name(const GroupView& g) {
  if (is_ddp(g)) return "a DistributedDataParallel module (" + std::to_string(g.size) + " ranks)";
  if (g.id == 0) return "the world group";
  char buf[64];
  std::snprintf(buf, sizeof buf, "group %016llx (%u ranks)",
                static_cast<unsigned long long>(g.id), g.size);
  return buf;
}

std::string secs(int64_t ms) { return format_duration(std::chrono::milliseconds(ms)); }

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8 && ranks.size() > 10) return out + " and " + std::to_string(ranks.size() - 8) + " more";
    out += (i ? "," : "") + std::to_string(ranks[i]);
  }
  return out;
}

std::string who(const RankView& r) {
  return "rank " + std::to_string(r.rank) + " (host " + r.host + ", node " +
         std::to_string(r.node_rank) + ", pid " + std::to_string(r.pid) + ")";
}

std::string where(const RankView& r) {
  std::string s = who(r) + ": " + rank_position(r);
  if (r.steps > 0) s += "; " + std::to_string(r.steps) + " steps";
  return s;
}

struct Member {
  const RankView* rank;
  GroupView group;  // issued 0 when the rank holds no slot for the group
};

// The members of the group whose unfinished call has waited longest, or
// empty when no rank waits in a call. World-group members that never made
// the group's slot (no collective yet) count, with nothing issued. A DDP
// step is "in flight" through its whole forward and backward: a collective
// waiting inside it is the better lead, so DDP slots come last.
std::vector<Member> stuck_group(const std::vector<const RankView*>& ranks) {
  const GroupView* oldest = nullptr;
  for (bool ddp : {false, true}) {
    for (const auto* r : ranks) {
      for (const auto& g : r->groups) {
        if (is_ddp(g) != ddp || g.waiting_ms < 0) continue;
        if (!oldest || g.waiting_ms > oldest->waiting_ms) oldest = &g;
      }
    }
    if (oldest) break;
  }
  if (!oldest) return {};
  std::vector<Member> members;
  for (const auto* r : ranks) {
    auto it = std::find_if(r->groups.begin(), r->groups.end(),
                           [&](const GroupView& g) { return g.id == oldest->id; });
    if (it != r->groups.end()) {
      members.push_back({r, *it});
    } else if (oldest->id == 0) {
      members.push_back({r, GroupView{0, oldest->size, 0, 0, 0, 0, -1}});
    }
  }
  return members;
}

}  // namespace

std::string rank_position(const RankView& r) {
  const GroupView* in_call = nullptr;
  const GroupView* last = nullptr;
  for (const auto& g : r.groups) {
    if (g.waiting_ms >= 0 && (!in_call || g.waiting_ms > in_call->waiting_ms)) in_call = &g;
    if (!last || g.issued > last->issued) last = &g;
  }
  if (in_call) {
    return "waiting in " + describe_call(*in_call, in_call->completed + 1) + " for " +
           secs(in_call->waiting_ms);
  }
  if (last && last->issued > 0) {
    return "not in a collective; last completed " + describe_call(*last, last->completed) +
           ", no progress for " + secs(r.idle_ms);
  }
  return r.reporting ? "no collective yet, no progress for " + secs(r.idle_ms)
                     : "reports no progress (no collective, step or hook)";
}


std::string describe_call(const GroupView& g, uint64_t seq) {
  std::string s = std::string(progress::op_name(g.op)) + " #" + std::to_string(seq) + " of " +
                  group_name(g);
  if (g.count > 0 && seq == g.issued) s += " (" + std::to_string(g.count) + " elements)";
  return s;
}

HangVerdict judge_hang(const std::vector<RankView>& ranks, int64_t timeout_ms) {
  HangVerdict v;
  std::vector<const RankView*> reporting;
  for (const auto& r : ranks) {
    if (r.reporting) reporting.push_back(&r);
  }
  if (reporting.empty() || timeout_ms <= 0) return v;
  std::sort(reporting.begin(), reporting.end(),
            [](const RankView* a, const RankView* b) { return a->rank < b->rank; });
  bool all_idle = std::all_of(reporting.begin(), reporting.end(),
                              [&](const RankView* r) { return r->idle_ms >= timeout_ms; });
  std::vector<Member> members = stuck_group(reporting);
  uint64_t n = 0;
  for (const auto& m : members) n = std::max(n, m.group.issued);
  std::vector<int> behind, waiting;
  int64_t longest = 0;
  const GroupView* call = nullptr;
  for (const auto& m : members) {
    if (m.group.issued < n) {
      behind.push_back(m.rank->rank);
    } else if (m.group.completed < n) {
      waiting.push_back(m.rank->rank);
      if (m.group.waiting_ms >= longest) {
        longest = m.group.waiting_ms;
        call = &m.group;
      }
    }
  }
  bool disagree = !behind.empty() && longest >= timeout_ms;
  if (!all_idle && !disagree) return v;
  v.hung = true;
  if (call && !behind.empty()) {
    v.culprits = behind;
    v.headline = std::string(behind.size() == 1 ? "rank " : "ranks ") + rank_list(behind) +
                 (behind.size() == 1 ? " has" : " have") + " not issued " +
                 describe_call(*call, n) + ", which " + (waiting.size() == 1 ? "rank " : "ranks ") +
                 rank_list(waiting) + (waiting.size() == 1 ? " has" : " have") +
                 " waited in for " + secs(longest);
  } else if (call) {
    v.culprits = waiting;
    v.headline = "every member of " + group_name(*call) + " (" + rank_list(waiting) +
                 ") has waited in " + describe_call(*call, n) + " for " + secs(longest) +
                 "; none is behind in it: a peer, the network or a rank in another group holds "
                 "it up";
  } else {
    for (const auto* r : reporting) v.culprits.push_back(r->rank);
    int64_t least = reporting.front()->idle_ms;
    for (const auto* r : reporting) least = std::min(least, r->idle_ms);
    v.headline = "no rank has progressed for " + secs(least) +
                 " (no collective in flight; no step marked)";
  }
  for (const auto* r : reporting) v.lines.push_back(where(*r));
  return v;
}

std::vector<int> find_stragglers(const std::vector<RankView>& ranks) {
  std::vector<const RankView*> known;
  for (const auto& r : ranks) {
    if (r.busy_ms_per_step >= 0) known.push_back(&r);
  }
  std::vector<int> out;
  if (known.size() < 2) return out;
  for (const auto* r : known) {
    std::vector<double> others;
    for (const auto* o : known) {
      if (o != r) others.push_back(o->busy_ms_per_step);
    }
    std::nth_element(others.begin(), others.begin() + others.size() / 2, others.end());
    double median = others[others.size() / 2];
    if (r->busy_ms_per_step >= 1.5 * median && r->busy_ms_per_step - median >= 1.0) {
      out.push_back(r->rank);
    }
  }
  return out;
}

json HangVerdict::to_json() const {
  return {{"hung", hung}, {"headline", headline}, {"culprits", culprits}, {"ranks", lines}};
}

}  // namespace ccrun::agent
