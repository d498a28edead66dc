// GroupProgress over a record in this process's memory: slots handed out in
// order, what issue() and complete() write, the no-op cases, subgroup ids.
#include "progress_writer.h"

#include <catch2/catch.hpp>

#include <memory>

using namespace ccrun;
using namespace ccrun::collectives;
using progress::Op;

namespace {

// A zeroed record with the header the agent writes.
std::unique_ptr<progress::Record> new_record() {
  auto r = std::make_unique<progress::Record>();
  r->magic = progress::kMagic;
  r->version = progress::kVersion;
  r->record_bytes = progress::kRecordBytes;
  return r;
}

}  // namespace

TEST_CASE("GroupProgress: open writes id, size and source into the next slot") {
  auto rec = new_record();
  GroupProgress world(rec.get()), sub(rec.get());
  world.open(kWorldGroupId, 4);
  sub.open(subgroup_id({1, 3}), 2);
  REQUIRE(rec->groups_used.load() == 2);
  REQUIRE(world.slot() == &rec->groups[0]);
  REQUIRE(sub.slot() == &rec->groups[1]);
  CHECK(rec->groups[0].id.load() == 0);
  CHECK(rec->groups[0].size.load() == 4);
  CHECK(rec->groups[0].source.load() == uint32_t(progress::Source::kCcrunCollectives));
  CHECK(rec->groups[1].id.load() == subgroup_id({1, 3}));
  CHECK(rec->groups[1].size.load() == 2);
  CHECK(rec->groups[0].issued.load() == 0);
}

TEST_CASE("GroupProgress: issue and complete write sequence numbers from 1") {
  auto rec = new_record();
  GroupProgress g(rec.get());
  g.open(kWorldGroupId, 2);
  const progress::GroupSlot& s = rec->groups[0];
  const int64_t before = progress::now_ns();

  ProgressTicket a = g.issue(Op::kAllReduce, 1000);
  CHECK(a.seq == 1);
  CHECK(s.issued.load() == 1);
  CHECK(s.completed.load() == 0);
  CHECK(s.op.load() == uint32_t(Op::kAllReduce));
  CHECK(s.count.load() == 1000);
  CHECK(s.issued_ns.load() >= before);

  ProgressTicket b = g.issue(Op::kBroadcast, 7);
  CHECK(b.seq == 2);
  CHECK(s.issued.load() == 2);
  CHECK(s.op.load() == uint32_t(Op::kBroadcast));
  CHECK(s.count.load() == 7);

  a.complete();
  CHECK(s.completed.load() == 1);
  CHECK(s.completed_ns.load() >= s.issued_ns.load() - 4'000'000);  // coarse ticks of <= 4 ms
  b.complete();
  CHECK(s.completed.load() == 2);
}

TEST_CASE("GroupProgress: each call counts in its op's calls, for the first 16 slots") {
  auto rec = new_record();
  std::vector<std::unique_ptr<GroupProgress>> groups;
  for (int i = 0; i < progress::kOpCountGroups + 1; ++i) {
    groups.push_back(std::make_unique<GroupProgress>(rec.get()));
    groups.back()->open(subgroup_id({i}), 1);
  }
  for (int i = 0; i < 3; ++i) (void)groups[0]->issue(Op::kAllReduce, 8);
  (void)groups[0]->issue(Op::kBarrier, 0);
  (void)groups[15]->issue(Op::kSend, 1);
  (void)groups[16]->issue(Op::kSend, 1);  // past the counted slots: its op and count only
  CHECK(rec->op_calls[0][uint32_t(Op::kAllReduce) - 1].load() == 3);
  CHECK(rec->op_calls[0][uint32_t(Op::kBarrier) - 1].load() == 1);
  CHECK(rec->op_calls[15][uint32_t(Op::kSend) - 1].load() == 1);
  CHECK(rec->groups[16].issued.load() == 1);
}

TEST_CASE("GroupProgress: a completion out of order never moves completed back") {
  auto rec = new_record();
  GroupProgress g(rec.get());
  g.open(kWorldGroupId, 1);
  ProgressTicket a = g.issue(Op::kAllReduce, 1), b = g.issue(Op::kAllReduce, 1);
  b.complete();
  a.complete();
  CHECK(rec->groups[0].completed.load() == 2);
  b.complete();  // observed done twice (is_completed, then wait)
  CHECK(rec->groups[0].completed.load() == 2);
}

TEST_CASE("GroupProgress: no record, no open, or no slot left records nothing") {
  GroupProgress none(nullptr);
  none.open(kWorldGroupId, 2);
  CHECK(none.slot() == nullptr);
  ProgressTicket t = none.issue(Op::kBarrier, 0);
  CHECK(t.slot == nullptr);
  t.complete();  // a no-op

  auto rec = new_record();
  GroupProgress unopened(rec.get());
  CHECK(unopened.issue(Op::kBarrier, 0).slot == nullptr);
  CHECK(rec->groups_used.load() == 0);

  std::vector<std::unique_ptr<GroupProgress>> groups;
  for (int i = 0; i < progress::kMaxGroups + 2; ++i) {
    groups.push_back(std::make_unique<GroupProgress>(rec.get()));
    groups.back()->open(subgroup_id({i}), 1);
  }
  CHECK(groups[progress::kMaxGroups - 1]->slot() == &rec->groups[progress::kMaxGroups - 1]);
  CHECK(groups[progress::kMaxGroups]->slot() == nullptr);
  CHECK(groups[progress::kMaxGroups + 1]->slot() == nullptr);
  CHECK(rec->groups_used.load() == uint32_t(progress::kMaxGroups + 2));  // readers clamp
  groups.back()->issue(Op::kAllReduce, 1).complete();                    // a no-op
  CHECK(rec->tail[0] == 0);
}

TEST_CASE("subgroup_id: the same for the same ranks, never the world's, order matters") {
  CHECK(subgroup_id({0, 1}) == subgroup_id({0, 1}));
  CHECK(subgroup_id({0, 1}) != subgroup_id({1, 0}));
  CHECK(subgroup_id({0, 1}) != subgroup_id({0, 2}));
  CHECK(subgroup_id({0, 1}) != kWorldGroupId);
  CHECK(subgroup_id({}) != kWorldGroupId);
}
