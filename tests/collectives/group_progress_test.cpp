// Process groups recording their calls in the progress record: ranks as
// threads over one HashStore, each rank with a record of its own (as each
// worker process has one), the Gloo group and the default group (Gloo plus
// the fake NCCL of fake_nccl.h). Checks what the agent reads: sequence
// numbers, op, count, completed == issued after wait, subgroup ids equal
// across members, and one record per user call in the default group.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>

#include "ccrun/collectives.h"
#include "ccrun/hash_store.h"
#include "collectives/fake_nccl.h"
#include "collectives/rank_threads.h"
#include "dispatch_group.h"
#include "gloo_group.h"
#include "progress_writer.h"

using namespace ccrun;
using namespace ccrun::collectives;
using namespace std::chrono_literals;
using progress::Op;

namespace {

using Records = std::vector<std::unique_ptr<progress::Record>>;

Records new_records(int n) {
  Records rs;
  for (int i = 0; i < n; ++i) {
    auto r = std::make_unique<progress::Record>();
    r->magic = progress::kMagic;
    r->version = progress::kVersion;
    r->record_bytes = progress::kRecordBytes;
    rs.push_back(std::move(r));
  }
  return rs;
}

// Runs fn(rank, group) on `size` threads; rank r's group is made by
// make(r, records[r]). Rethrows the first failure.
void run_ranks(int size, Records& records,
               const std::function<std::shared_ptr<ProcessGroup>(int, progress::Record*)>& make,
               const std::function<void(int, ProcessGroup&)>& fn) {
  test::on_rank_threads(size, [&](int r) { fn(r, *make(r, records[size_t(r)].get())); });
}

// A Gloo world group of `size` ranks over `store`, recording into `record`.
std::function<std::shared_ptr<ProcessGroup>(int, progress::Record*)> gloo_world(
    std::shared_ptr<store::Store> store, int size, std::chrono::milliseconds timeout = 20s) {
  return [store, size, timeout](int r, progress::Record* record) {
    auto progress = std::make_shared<GroupProgress>(record);
    auto pg = make_gloo_group(store, r, size, timeout, "127.0.0.1", progress);
    progress->open(kWorldGroupId, uint32_t(size));
    return pg;
  };
}

void check_last(const progress::GroupSlot& s, uint64_t seq, Op op, uint64_t count) {
  CHECK(s.issued.load() == seq);
  CHECK(s.completed.load() == seq);
  CHECK(s.op.load() == uint32_t(op));
  CHECK(s.count.load() == count);
  CHECK(s.issued_ns.load() > 0);
  CHECK(s.completed_ns.load() >= s.issued_ns.load());
}

}  // namespace

TEST_CASE("Gloo group: each call is recorded in the rank's slot, completed after wait",
          "[collectives][progress]") {
  constexpr int kSize = 3;
  Records records = new_records(kSize);
  auto store = std::make_shared<store::HashStore>();
  run_ranks(kSize, records, gloo_world(store, kSize), [&](int r, ProcessGroup& pg) {
    const progress::GroupSlot& s = records[size_t(r)]->groups[0];
    std::vector<float> v(100, float(r));
    pg.all_reduce({v.data(), v.size(), DataType::kFloat32})->wait();
    check_last(s, 1, Op::kAllReduce, 100);
    pg.broadcast({v.data(), 10, DataType::kFloat32}, 0)->wait();
    check_last(s, 2, Op::kBroadcast, 10);
    std::vector<float> all(300);
    pg.all_gather({v.data(), 100, DataType::kFloat32}, {all.data(), 300, DataType::kFloat32})->wait();
    check_last(s, 3, Op::kAllGather, 100);
    // The equal-split all_to_all is one call, recorded once.
    std::vector<float> out(300);
    pg.all_to_all({all.data(), 300, DataType::kFloat32}, {out.data(), 300, DataType::kFloat32})->wait();
    check_last(s, 4, Op::kAllToAll, 300);
    // Two in flight: the second wait leaves both completed.
    auto a = pg.all_reduce({v.data(), 5, DataType::kFloat32});
    auto b = pg.barrier();
    CHECK(s.issued.load() == 6);
    CHECK(s.op.load() == uint32_t(Op::kBarrier));
    b->wait();
    CHECK(a->is_completed());
    check_last(s, 6, Op::kBarrier, 0);
  });
  for (auto& rec : records) {
    CHECK(rec->groups_used.load() == 1);
    CHECK(rec->groups[0].id.load() == kWorldGroupId);
    CHECK(rec->groups[0].size.load() == uint32_t(kSize));
    CHECK(rec->groups[0].source.load() == uint32_t(progress::Source::kCcrunCollectives));
  }
}

TEST_CASE("Gloo group: a subgroup gets a slot on its members only, with the same id on each",
          "[collectives][progress]") {
  constexpr int kSize = 3;
  Records records = new_records(kSize);
  auto store = std::make_shared<store::HashStore>();
  run_ranks(kSize, records, gloo_world(store, kSize), [&](int r, ProcessGroup& pg) {
    auto sub = pg.new_group({2, 0});
    auto all = pg.new_group({0, 1, 2});  // every rank: a subgroup, not the world
    REQUIRE(bool(sub) == (r != 1));
    int32_t x = r;
    if (sub) {
      sub->all_reduce({&x, 1, DataType::kInt32})->wait();
      sub->all_reduce({&x, 1, DataType::kInt32})->wait();
    }
    all->barrier()->wait();
    pg.barrier()->wait();
  });
  const progress::Record &r0 = *records[0], &r1 = *records[1], &r2 = *records[2];
  // Rank 0 and 2: world, {2,0}, {0,1,2}; rank 1: world, {0,1,2}.
  REQUIRE(r0.groups_used.load() == 3);
  REQUIRE(r1.groups_used.load() == 2);
  REQUIRE(r2.groups_used.load() == 3);
  const uint64_t sub_id = r0.groups[1].id.load();
  CHECK(sub_id != kWorldGroupId);
  CHECK(sub_id == subgroup_id({2, 0}));
  CHECK(r2.groups[1].id.load() == sub_id);
  CHECK(r0.groups[1].size.load() == 2);
  for (const progress::Record* rec : {&r0, &r2}) {
    check_last(rec->groups[1], 2, Op::kAllReduce, 1);
    check_last(rec->groups[2], 1, Op::kBarrier, 0);
    CHECK(rec->groups[2].id.load() == r1.groups[1].id.load());
  }
  CHECK(r1.groups[1].id.load() != kWorldGroupId);
  CHECK(r1.groups[1].id.load() != sub_id);
  check_last(r1.groups[1], 1, Op::kBarrier, 0);
  for (const progress::Record* rec : {&r0, &r1, &r2}) check_last(rec->groups[0], 1, Op::kBarrier, 0);
}

TEST_CASE("Gloo group: a failed call stays issued, not completed", "[collectives][progress]") {
  Records records = new_records(2);
  auto store = std::make_shared<store::HashStore>();
  run_ranks(2, records, gloo_world(store, 2, 300ms), [&](int r, ProcessGroup& pg) {
    if (r == 1) return;  // never joins the all_reduce
    int32_t x = 1;
    CHECK_THROWS(pg.all_reduce({&x, 1, DataType::kInt32})->wait());
  });
  CHECK(records[0]->groups[0].issued.load() == 1);
  CHECK(records[0]->groups[0].completed.load() == 0);
  CHECK(records[1]->groups[0].issued.load() == 0);
}

TEST_CASE("default group: host and CUDA calls share its one slot, each recorded once",
          "[collectives][progress][dispatch]") {
  std::string saved = std::getenv("LOCAL_RANK") ? std::getenv("LOCAL_RANK") : "";
  unsetenv("LOCAL_RANK");
  auto cuda = std::make_shared<test::FakeCuda>(2);
  Records records = new_records(2);
  auto store = std::make_shared<store::HashStore>();
  auto make = [&](int r, progress::Record* record) {
    GroupSpec spec;
    spec.store = store;
    spec.rank = r;
    spec.size = 2;
    spec.timeout = 20s;
    spec.progress_record = record;
    return make_group(spec, cuda->devices_for_rank());
  };
  run_ranks(2, records, make, [&](int r, ProcessGroup& pg) {
    const progress::GroupSlot& s = records[size_t(r)]->groups[0];
    std::vector<float> h(8, 1.0f);
    pg.all_reduce({h.data(), h.size(), DataType::kFloat32})->wait();
    check_last(s, 1, Op::kAllReduce, 8);
    float* d = cuda->alloc<float>(4, r);
    pg.all_reduce({d, 4, DataType::kFloat32, DeviceType::kCuda})->wait();  // makes the NCCL half
    check_last(s, 2, Op::kAllReduce, 4);
    pg.broadcast({d, 3, DataType::kFloat32, DeviceType::kCuda}, 1)->wait();
    check_last(s, 3, Op::kBroadcast, 3);
    pg.barrier()->wait();
    check_last(s, 4, Op::kBarrier, 0);
    // A subgroup split from both halves: one slot, both halves' calls in it.
    auto sub = pg.new_group({0, 1});
    sub->all_reduce({d, 2, DataType::kFloat32, DeviceType::kCuda})->wait();
    sub->all_reduce({h.data(), 5, DataType::kFloat32})->wait();
    check_last(records[size_t(r)]->groups[1], 2, Op::kAllReduce, 5);
  });
  if (!saved.empty()) setenv("LOCAL_RANK", saved.c_str(), 1);
  for (auto& rec : records) {
    CHECK(rec->groups_used.load() == 2);  // the halves take none of their own
    CHECK(rec->groups[0].id.load() == kWorldGroupId);
    CHECK(rec->groups[1].id.load() == subgroup_id({0, 1}));
  }
}

TEST_CASE("default group: the Gloo and NCCL backends alone record into the world's slot",
          "[collectives][progress][dispatch]") {
  std::string saved = std::getenv("LOCAL_RANK") ? std::getenv("LOCAL_RANK") : "";
  unsetenv("LOCAL_RANK");
  auto cuda = std::make_shared<test::FakeCuda>(1);
  for (CollectivesBackend backend : {CollectivesBackend::kGloo, CollectivesBackend::kNccl}) {
    Records records = new_records(1);
    GroupSpec spec;
    spec.backend = backend;
    spec.store = std::make_shared<store::HashStore>();
    spec.progress_record = records[0].get();
    auto pg = make_group(spec, cuda->devices_for_rank());
    const DeviceType where = backend == CollectivesBackend::kNccl ? DeviceType::kCuda : DeviceType::kHost;
    float* d = cuda->alloc<float>(6, 0);
    pg->all_reduce({d, 6, DataType::kFloat32, where})->wait();
    pg->barrier()->wait();
    CHECK(records[0]->groups_used.load() == 1);
    check_last(records[0]->groups[0], 2, Op::kBarrier, 0);
  }
  if (!saved.empty()) setenv("LOCAL_RANK", saved.c_str(), 1);
}
