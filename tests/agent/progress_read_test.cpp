// Reading a progress record's group slots (agent/progress_read.h): records
// filled in here as a worker's writers would leave them.
#include "progress_read.h"

#include <catch2/catch.hpp>
#include <memory>

using ccrun::GroupView;
using ccrun::agent::GroupsRead;
using ccrun::agent::read_groups;
namespace progress = ccrun::progress;

namespace {

constexpr int64_t kSecond = 1'000'000'000;

std::unique_ptr<progress::Record> empty_record() {
  auto r = std::make_unique<progress::Record>();  // value-initialized: zero
  r->magic = progress::kMagic;
  return r;
}

// Fills the next slot: a group of `size` whose last call `op` was issued
// (at `issued_ns`) and `completed` as given.
progress::GroupSlot& add_slot(progress::Record& r, progress::Op op, uint64_t issued,
                              uint64_t completed, int64_t issued_ns, uint32_t size = 2) {
  auto& s = r.groups[r.groups_used.fetch_add(1)];
  s.id = 7, s.size = size, s.source = uint32_t(progress::Source::kTorch);
  s.op = uint32_t(op), s.issued = issued, s.completed = completed, s.issued_ns = issued_ns;
  return s;
}

}  // namespace

TEST_CASE("every slot in use is a view, a slot being set up is skipped") {
  auto r = empty_record();
  add_slot(*r, progress::Op::kAllReduce, 12, 11, 50 * kSecond).count = 256;
  add_slot(*r, progress::Op::kBarrier, 3, 3, 40 * kSecond, /*size=*/0);  // being set up
  std::vector<GroupView> groups;
  GroupsRead read = read_groups(*r, 53 * kSecond, groups);
  REQUIRE(groups.size() == 1);
  CHECK(groups[0].issued == 12);
  CHECK(groups[0].completed == 11);
  CHECK(groups[0].count == 256);
  CHECK(groups[0].waiting_ms == 3'000);
  CHECK(read.last_ns == 50 * kSecond);
  CHECK(read.most_calls == 11);
  CHECK(read.ddp_steps == 0);
}

TEST_CASE("DDP steps are counted from their slots, every DDP module's") {
  auto r = empty_record();
  add_slot(*r, progress::Op::kDdpStep, 30, 30, 10 * kSecond);
  add_slot(*r, progress::Op::kDdpStep, 4, 3, 11 * kSecond);
  add_slot(*r, progress::Op::kAllReduce, 90, 90, 12 * kSecond);  // not a step
  std::vector<GroupView> groups;
  CHECK(read_groups(*r, 12 * kSecond, groups).ddp_steps == 34);
}

TEST_CASE("a DDP step whose backward never ended is completed by the next step's issue") {
  // Steps 2 and 3 had no end of backward written (a forward without backward, a loss that did
  // not reach the hooked parameter): step 4 is running, 3 and before are done.
  auto r = empty_record();
  add_slot(*r, progress::Op::kDdpStep, 4, 1, 20 * kSecond);
  add_slot(*r, progress::Op::kAllReduce, 4, 1, 20 * kSecond);  // a collective's is as written
  std::vector<GroupView> groups;
  read_groups(*r, 21 * kSecond, groups);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].completed == 3);
  CHECK(groups[0].waiting_ms == 1'000);
  CHECK(groups[1].completed == 1);
}

TEST_CASE("slots handed out past the record's 48 are not read, and are counted") {
  auto r = empty_record();
  for (int i = 0; i < progress::kMaxGroups; ++i) {
    add_slot(*r, progress::Op::kAllReduce, 1, 1, kSecond);
  }
  std::vector<GroupView> groups;
  CHECK(read_groups(*r, kSecond, groups).unrecorded == 0);
  r->groups_used = progress::kMaxGroups + 5;
  groups.clear();
  CHECK(read_groups(*r, kSecond, groups).unrecorded == 5);
  CHECK(groups.size() == size_t(progress::kMaxGroups));
}

TEST_CASE("the first 16 slots carry their per-op call counts, the others none") {
  auto r = empty_record();
  for (int i = 0; i < 17; ++i) add_slot(*r, progress::Op::kAllReduce, 5, 5, 10 * kSecond);
  r->op_calls[0][uint32_t(progress::Op::kAllReduce) - 1] = 4;
  r->op_calls[0][uint32_t(progress::Op::kBarrier) - 1] = 1;
  r->op_calls[15][0] = 5;
  std::vector<GroupView> groups;
  read_groups(*r, 10 * kSecond, groups);
  REQUIRE(groups.size() == 17);
  CHECK(groups[0].op_calls[uint32_t(progress::Op::kAllReduce) - 1] == 4);
  CHECK(groups[0].op_calls[uint32_t(progress::Op::kBarrier) - 1] == 1);
  CHECK(groups[15].op_calls[0] == 5);
  CHECK(groups[16].op_calls == std::array<uint32_t, progress::kCountedOps>{});
}
