// The hang decision and the straggler rule (see hang_verdict.h).
#include "ccrun/hang_verdict.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "ccrun/error.h"
#include "ccrun/progress.h"

namespace ccrun::agent {
namespace {

using json = nlohmann::json;

bool is_ddp(const GroupView& g) { return g.op == uint32_t(progress::Op::kDdpStep); }

bool is_p2p(uint32_t op) {
  return op == uint32_t(progress::Op::kSend) || op == uint32_t(progress::Op::kRecv);
}

std::string group_name(const GroupView& g) {
  if (is_ddp(g)) return "a DistributedDataParallel module (" + std::to_string(g.size) + " ranks)";
  if (g.id == 0) return "the world group";
  char buf[64];
  std::snprintf(buf, sizeof buf, "group %016llx (%u ranks)",
                static_cast<unsigned long long>(g.id), g.size);
  return buf;
}

std::string secs(int64_t ms) { return format_duration(std::chrono::milliseconds(ms)); }

// "rank 2" or "ranks 0-2,5".
std::string ranks_named(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + compress_ranks(ranks);
}

std::string who(const RankView& r) {
  return "rank " + std::to_string(r.rank) + " (host " + r.host + ", node " +
         std::to_string(r.node_rank) + ", pid " + std::to_string(r.pid) + ")";
}

std::string where(const RankView& r) {
  std::string s = who(r) + ": " + rank_position(r);
  if (r.steps > 0) s += "; " + std::to_string(r.steps) + " steps";
  if (std::string st = process_state(r); !st.empty()) s += "; " + st;
  return s;
}

struct Member {
  const RankView* rank;
  GroupView group;  // issued 0 when the rank holds no slot for the group
};

// The group's last call any member issued: the one the members behind have not.
uint64_t last_issued(const std::vector<Member>& members) {
  uint64_t n = 0;
  for (const auto& m : members) n = std::max(n, m.group.issued);
  return n;
}

// The members of group `g` (by id) among `ranks`. World-group members that
// never made the group's slot (no collective yet) count, with nothing issued.
std::vector<Member> members_of(const std::vector<const RankView*>& ranks, const GroupView& g) {
  std::vector<Member> members;
  for (const auto* r : ranks) {
    auto it = std::find_if(r->groups.begin(), r->groups.end(),
                           [&](const GroupView& mine) { return mine.id == g.id; });
    if (it != r->groups.end()) {
      members.push_back({r, *it});
    } else if (g.id == 0) {
      members.push_back({r, GroupView{0, g.size, 0, 0, 0, 0, -1}});
    }
  }
  return members;
}

// Whether `r` has made no progress for `timeout_ms` as far as anyone can tell: a rank with
// process groups its record has no slot for may progress in them unseen, unless it waits in
// a call it recorded.
bool idle_for(const RankView& r, int64_t timeout_ms) {
  if (r.idle_ms < timeout_ms) return false;
  return r.groups_unrecorded == 0 ||
         std::any_of(r.groups.begin(), r.groups.end(),
                     [](const GroupView& g) { return g.issued > g.completed; });
}

// The members of the group whose unfinished call has waited longest, or
// empty when no rank waits in a call. A DDP step is "in flight" through its
// whole forward and backward: a collective waiting inside it is the better
// lead, so DDP slots come last.
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
  return oldest ? members_of(ranks, *oldest) : std::vector<Member>{};
}

// Where a member behind in the stuck group's call is itself held up: the
// call of another group it waits in, the longest (no DDP step: a rank inside
// its step is at work); null when every member behind waits in none. A
// subgroup's hang holds up the world group's next call too, and the world
// group's call may be the one that has waited longest: its member behind
// that waits for the subgroup is not a culprit, the subgroup's is.
const GroupView* held_up_in(const std::vector<Member>& members) {
  uint64_t n = last_issued(members);
  const GroupView* held = nullptr;
  for (const auto& m : members) {
    if (m.group.issued >= n) continue;
    for (const auto& g : m.rank->groups) {
      if (g.id == m.group.id || g.waiting_ms < 0 || is_ddp(g) || is_p2p(g.op)) continue;
      if (!held || g.waiting_ms > held->waiting_ms) held = &g;
    }
  }
  return held;
}

// stuck_group's members, or those of the call its members behind wait in,
// followed until the members behind wait in none (each group once).
std::vector<Member> follow_waits(const std::vector<const RankView*>& ranks, std::vector<Member> members) {
  std::set<uint64_t> seen;
  while (!members.empty() && seen.insert(members.front().group.id).second) {
    const GroupView* held = held_up_in(members);
    if (!held || seen.count(held->id)) break;
    members = members_of(ranks, *held);
  }
  return members;
}

// Whether the rank made point-to-point calls in the group (its last call,
// or its counts: send and recv are numbered with the group's collectives).
bool has_p2p(const GroupView& g) {
  return (g.issued > 0 && is_p2p(g.op)) || g.op_calls[uint32_t(progress::Op::kSend) - 1] > 0 ||
         g.op_calls[uint32_t(progress::Op::kRecv) - 1] > 0;
}

// When no rank waits in a call, the members of the first group whose ranks
// issued different numbers of calls, or different calls as their last: an
// asynchronous backend's call returns once queued (NCCL's: the GPU runs it
// later), so a rank behind leaves the others blocked outside any call, in
// whatever waits for the GPU. The world group first, DDP modules last;
// groups with sends or receives are left out (a pipeline's ranks send and
// receive different numbers of times); empty when every group agrees.
std::vector<Member> disagreeing_group(const std::vector<const RankView*>& ranks) {
  std::vector<const GroupView*> groups;  // one view of each group
  for (const auto* r : ranks) {
    for (const auto& g : r->groups) {
      if (std::none_of(groups.begin(), groups.end(), [&](auto* o) { return o->id == g.id; })) {
        groups.push_back(&g);
      }
    }
  }
  std::stable_sort(groups.begin(), groups.end(), [](auto* a, auto* b) {
    return std::make_tuple(is_ddp(*a), a->id != 0) < std::make_tuple(is_ddp(*b), b->id != 0);
  });
  for (const auto* g : groups) {
    std::vector<Member> members = members_of(ranks, *g);
    if (std::any_of(members.begin(), members.end(), [](const Member& m) { return has_p2p(m.group); })) {
      continue;  // sends and receives are the group's calls too: their counts differ by design
    }
    auto differs = [&](const Member& m) {
      const GroupView& a = m.group;
      const GroupView& b = members.front().group;
      return a.issued != b.issued || (a.issued > 0 && (a.op != b.op || a.count != b.count));
    };
    if (std::any_of(members.begin(), members.end(), differs)) return members;
  }
  return {};
}

// The call a member issued as #n of its group: op and element count.
struct CallShape {
  uint32_t op = 0;
  uint64_t count = 0;
  bool operator<(const CallShape& o) const { return std::tie(op, count) < std::tie(o.op, o.count); }
  bool operator==(const CallShape& o) const { return op == o.op && count == o.count; }
};

std::string shape_text(const CallShape& c) {
  std::string s(progress::op_name(c.op));
  if (c.count > 0) s += " (" + std::to_string(c.count) + " elements)";
  return s;
}

// What the members' per-op counts say of the ranks that differ from the
// majority: "rank 2 made one all_reduce fewer (59 against 60)", for the op
// the majority issued as the call they part at, or "rank 2 made as many
// all_reduce calls (60)" (the call differs in its arguments, not by a skip);
// "" when the counts are not recorded, or the majority's own counts disagree.
std::string count_difference(const std::vector<Member>& members, uint32_t op,
                             const std::vector<int>& majority, const std::vector<int>& culprits) {
  if (!progress::counted_op(op)) return "";
  auto counted = [](const GroupView& g) {
    for (uint32_t c : g.op_calls) {
      if (c > 0) return true;
    }
    return false;
  };
  std::optional<uint32_t> expected;
  std::map<uint32_t, std::vector<int>> by_calls;  // a culprit's calls of `op` -> its ranks
  for (const auto& m : members) {
    if (!counted(m.group)) continue;
    uint32_t calls = m.group.op_calls[op - 1];
    if (std::find(majority.begin(), majority.end(), m.rank->rank) != majority.end()) {
      if (expected && *expected != calls) return "";
      expected = calls;
    } else if (std::find(culprits.begin(), culprits.end(), m.rank->rank) != culprits.end()) {
      by_calls[calls].push_back(m.rank->rank);
    }
  }
  if (!expected) return "";
  std::string out;
  if (by_calls.size() == 1 && by_calls.begin()->first == *expected) {  // a size, not a skip
    return ranks_named(by_calls.begin()->second) + " made as many " + progress::op_name(op) +
           " calls (" + std::to_string(*expected) + ")";
  }
  for (const auto& [calls, ranks] : by_calls) {
    if (calls == *expected) continue;
    uint32_t diff = calls < *expected ? *expected - calls : calls - *expected;
    out += (out.empty() ? "" : "; ") + ranks_named(ranks) + " made " +
           (diff == 1 ? "one " + std::string(progress::op_name(op))
                      : std::to_string(diff) + " " + progress::op_name(op) + " calls") +
           (calls < *expected ? " fewer (" : " more (") + std::to_string(calls) + " against " +
           std::to_string(*expected) + ")";
  }
  return out;
}

// When every member of the group waits in call #n but they did not all
// issue the same call there (an op or a size that differs: a desync), the
// verdict that names the members that differ from the majority; "" when
// they agree. A tie names every shape with its ranks.
std::string mismatch(const std::vector<Member>& members, uint64_t n, std::vector<int>& culprits) {
  std::map<CallShape, std::vector<int>> by_shape;
  for (const auto& m : members) {
    if (m.group.issued == n) by_shape[{m.group.op, m.group.count}].push_back(m.rank->rank);
  }
  if (by_shape.size() < 2) return "";
  auto majority = by_shape.begin();
  bool tie = false;
  for (auto it = by_shape.begin(); it != by_shape.end(); ++it) {
    if (it->second.size() > majority->second.size()) {
      majority = it, tie = false;
    } else if (it != majority && it->second.size() == majority->second.size()) {
      tie = true;
    }
  }
  std::string where_n = "call #" + std::to_string(n) + " of " + group_name(members.front().group);
  std::string out;
  for (const auto& [shape, ranks] : by_shape) {
    if (!tie && shape == majority->first) continue;
    culprits.insert(culprits.end(), ranks.begin(), ranks.end());
    bool same_op = shape.op == majority->first.op;
    out += (out.empty() ? "" : "; ") + ranks_named(ranks) + " issued " +
           (same_op && !tie ? std::string(progress::op_name(shape.op)) + " with " +
                                  std::to_string(shape.count) + " elements"
                            : shape_text(shape)) +
           " as " + where_n;
  }
  std::sort(culprits.begin(), culprits.end());
  if (tie) return "the members of " + group_name(members.front().group) +
                  " issued different calls as #" + std::to_string(n) + ": " + out;
  out += ", where " + ranks_named(majority->second) + " issued " + shape_text(majority->first);
  std::string counts = count_difference(members, majority->first.op, majority->second, culprits);
  if (!counts.empty()) return out + ": a desync; " + counts;
  return out + ": a desync (a call skipped, added or made with other arguments on the " +
         (culprits.size() == 1 ? "rank" : "ranks") + " named first)";
}

// "rank 2 has not issued all_reduce #21 of the world group (256 elements),
// which ranks 0,1,3": the ranks `behind` that never issued `call` as #n, and
// the `others` that did (the caller says what they did with it).
std::string not_issued(const std::vector<int>& behind, const GroupView& call, uint64_t n,
                       const std::vector<int>& others) {
  return ranks_named(behind) + (behind.size() == 1 ? " has" : " have") + " not issued " +
         describe_call(call, n) + ", which " + ranks_named(others);
}

// When no rank waits in a call and `members` (disagreeing_group's) disagree,
// the verdict naming the ranks behind, or those that issued another call:
// "rank 2 has not issued all_reduce #21 of the world group (256 elements),
// which ranks 0,1,3 issued (its last: #20); no rank has progressed for 5s
// ..."; "" when `members` is empty.
std::string idle_verdict(const std::vector<Member>& members, int64_t idle_ms,
                         std::vector<int>& culprits) {
  if (members.empty()) return "";
  uint64_t n = last_issued(members);
  std::vector<int> behind, ahead;
  std::set<uint64_t> lasts;
  const GroupView* lead = nullptr;
  for (const auto& m : members) {
    if (m.group.issued < n) {
      behind.push_back(m.rank->rank);
      lasts.insert(m.group.issued);
    } else {
      ahead.push_back(m.rank->rank);
      lead = &m.group;
    }
  }
  std::string why = "no rank has progressed for " + secs(idle_ms) +
                    " (none waits in a call: an asynchronous backend's call, NCCL's, returns "
                    "once queued)";
  if (behind.empty()) {
    std::string desync = mismatch(members, n, culprits);
    return desync.empty() ? "" : desync + "; " + why;
  }
  culprits = behind;
  std::string last = lasts.size() == 1 && *lasts.begin() > 0
                         ? std::string(behind.size() == 1 ? " (its last: #" : " (their last: #") +
                               std::to_string(*lasts.begin()) + ")"
                         : "";
  return not_issued(behind, *lead, n, ahead) + " issued" + last + "; " + why;
}

// When the call that has waited longest is a send or a receive, only its
// peer takes part in it, and the record does not name the peer: the ranks of
// its group that never issued it are not behind in it. The ranks in no call,
// idle for the timeout while every other rank waits in one, are then the
// culprits ("rank 2 is in no call, while ranks 0,1,3 wait in calls (the
// longest: rank 3 in recv #25 ... for 31s, a point-to-point call)"); with
// none, the ranks in calls, and `named` is false.
std::string p2p_verdict(const std::vector<const RankView*>& ranks, int64_t timeout_ms,
                        std::vector<int>& culprits, bool& named) {
  std::vector<int> outside, inside;
  bool at_work = false;  // a rank outside calls that has progressed within the timeout
  const GroupView* call = nullptr;  // the call that has waited longest, in rank call_rank
  int call_rank = -1;
  for (const auto* r : ranks) {
    bool in_call = false;
    for (const auto& g : r->groups) {
      if (g.waiting_ms < 0) continue;
      in_call = true;
      if (!call || g.waiting_ms > call->waiting_ms) call = &g, call_rank = r->rank;
    }
    (in_call ? inside : outside).push_back(r->rank);
    at_work = at_work || (!in_call && r->idle_ms < timeout_ms);
  }
  if (!call) return "";
  std::string longest = "rank " + std::to_string(call_rank) + " in " +
                        describe_call(*call, call->completed + 1) + " for " +
                        secs(call->waiting_ms) + (is_p2p(call->op) ? ", a point-to-point call" : "");
  named = !outside.empty() && !at_work;
  culprits = named ? outside : inside;
  if (!named) {
    return ranks_named(inside) + (inside.size() == 1 ? " has" : " have") +
           " waited in calls (the longest: " + longest +
           (is_p2p(call->op) ? ", which its peer holds up" : "") +
           ": the stacks say where each rank is)";
  }
  return ranks_named(outside) + (outside.size() == 1 ? " is" : " are") + " in no call, while " +
         ranks_named(inside) + (inside.size() == 1 ? " waits" : " wait") +
         " in calls (the longest: " + longest + ")";
}

}  // namespace

std::string process_state(const RankView& r) {
  switch (r.state) {
    case 'T':
      return "its process is stopped (state T: SIGSTOP, or Ctrl-Z)";
    case 't':
      return "its process is stopped by a tracer (state t: a debugger)";
    case 'D':
      return "its process is in uninterruptible sleep (state D: a disk, a network file system "
             "or a driver)";
    default:
      return "";
  }
}

std::string rank_position(const RankView& r, bool with_times) {
  const GroupView* in_call = nullptr;
  const GroupView* last = nullptr;
  for (const auto& g : r.groups) {
    if (g.waiting_ms >= 0 && (!in_call || g.waiting_ms > in_call->waiting_ms)) in_call = &g;
    if (!last || g.issued > last->issued) last = &g;
  }
  if (in_call) {
    return "waiting in " + describe_call(*in_call, in_call->completed + 1) +
           (with_times ? " for " + secs(in_call->waiting_ms) : "");
  }
  std::string idle = with_times ? ", no progress for " + secs(r.idle_ms) : "";
  if (last && last->issued > 0) {
    return "not in a collective; last returned from " + describe_call(*last, last->completed) + idle;
  }
  return r.reporting ? "no collective yet" + idle
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
                              [&](const RankView* r) { return idle_for(*r, timeout_ms); });
  std::vector<Member> members = follow_waits(reporting, stuck_group(reporting));
  bool none_waits = members.empty();
  if (none_waits && all_idle) members = disagreeing_group(reporting);
  uint64_t n = last_issued(members);
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
  int64_t least = reporting.front()->idle_ms;
  for (const auto* r : reporting) least = std::min(least, r->idle_ms);
  if (none_waits) {
    v.headline = idle_verdict(members, least, v.culprits);
  } else if (!call || is_p2p(call->op)) {
    // No member waits in the group's last call: a send or receive behind (only a peer takes
    // part in it), as when the call that waited longest is one.
    v.headline = p2p_verdict(reporting, timeout_ms, v.culprits, v.cause_named);
  } else if (!behind.empty()) {
    v.culprits = behind;
    v.headline = not_issued(behind, *call, n, waiting) + (waiting.size() == 1 ? " has" : " have") +
                 " waited in for " + secs(longest);
  } else if (std::string desync = mismatch(members, n, v.culprits); !desync.empty()) {
    v.headline = desync + "; waited for " + secs(longest);
  } else {
    v.culprits = waiting;
    v.cause_named = false;
    v.headline = "every member of " + group_name(*call) + " (" + ranks_named(waiting) +
                 ") has waited in " + describe_call(*call, n) + " for " + secs(longest) +
                 "; none is behind in it: a peer, the network or a rank in another group holds "
                 "it up";
  }
  if (v.headline.empty()) {
    for (const auto* r : reporting) v.culprits.push_back(r->rank);
    v.cause_named = false;
    v.headline = "no rank has progressed for " + secs(least) +
                 " (no rank inside a collective call; no step marked)";
  }
  for (const auto* r : reporting) {
    if (std::find(v.culprits.begin(), v.culprits.end(), r->rank) == v.culprits.end()) continue;
    if (std::string st = process_state(*r); !st.empty()) {
      v.headline += "; rank " + std::to_string(r->rank) + ": " + st;
    }
  }
  for (const auto* r : reporting) v.lines.push_back(where(*r));
  v.classes = rank_classes(reporting);
  return v;
}

std::string desync_at_failure(const std::vector<RankView>& ranks, int failed) {
  std::vector<const RankView*> all;
  const RankView* dead = nullptr;
  for (const auto& r : ranks) {
    all.push_back(&r);
    if (r.rank == failed) dead = &r;
  }
  if (!dead) return "";
  std::vector<const GroupView*> calls;  // its groups with a collective in flight, DDP steps last
  for (const auto& g : dead->groups) {
    if (g.issued > g.completed && !is_p2p(g.op)) calls.push_back(&g);
  }
  std::stable_sort(calls.begin(), calls.end(),
                   [](auto* a, auto* b) { return !is_ddp(*a) && is_ddp(*b); });
  for (const auto* g : calls) {
    std::vector<int> culprits;
    std::string desync = mismatch(members_of(all, *g), g->issued, culprits);
    if (!desync.empty()) return desync;
  }
  return "";
}

std::vector<std::string> rank_classes(const std::vector<const RankView*>& ranks) {
  // Where each rank is, without its durations: ranks in the same place
  // read the same. The first rank of a class keeps the class's place.
  std::map<std::string, std::vector<int>> by_place;
  std::vector<std::string> order;
  for (const auto* r : ranks) {
    std::string place = rank_position(*r, false);
    if (std::string st = process_state(*r); !st.empty()) place += "; " + st;
    auto [it, fresh] = by_place.try_emplace(place);
    if (fresh) order.push_back(place);
    it->second.push_back(r->rank);
  }
  std::vector<std::string> out;
  for (const auto& place : order) {
    const auto& rs = by_place[place];
    out.push_back(ranks_named(rs) + (rs.size() > 1 ? " (" + std::to_string(rs.size()) + ")" : "") +
                  ": " + place);
  }
  return out;
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
  return {{"hung", hung}, {"headline", headline}, {"culprits", culprits}, {"ranks", lines},
          {"classes", classes}};
}

std::vector<std::string> HangVerdict::console_lines() const {
  // Up to 16 ranks, each its own line; beyond, the classes.
  const std::vector<std::string>& src = lines.size() <= 16 ? lines : classes;
  std::vector<std::string> out(src.begin(), src.begin() + std::min(src.size(), kConsoleLines));
  if (src.size() > kConsoleLines) {
    out.back() = "... and " + std::to_string(src.size() - kConsoleLines + 1) +
                 " more classes (failure_report.json has every rank)";
  }
  return out;
}

}  // namespace ccrun::agent
