// The default group (CollectivesBackend::kAuto) on CPU: host buffers through the real
// Gloo group, CUDA buffers through the NCCL group over the fake CUDA and
// NCCL of fake_nccl.h, ranks as threads over one HashStore. The fake says
// GPUs are visible: choosing NCCL for the whole group whenever a GPU is
// visible would break every host-buffer program on such a machine.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <functional>
#include <thread>

#include "ccrun/collectives.h"
#include "ccrun/hash_store.h"
#include "collectives/fake_nccl.h"
#include "dispatch_group.h"

using namespace ccrun;
using namespace ccrun::test;
using namespace std::chrono_literals;

namespace {

// Runs fn(rank, group) on `size` ranks of default groups at once; rethrows
// the first failure.
void run_auto_ranks(std::shared_ptr<FakeCuda> cuda, int size,
                    const std::function<void(int, ProcessGroup&)>& fn, bool nccl_at_init = false,
                    std::chrono::milliseconds timeout = 20s) {
  std::string saved = std::getenv("LOCAL_RANK") ? std::getenv("LOCAL_RANK") : "";
  unsetenv("LOCAL_RANK");
  auto store = std::make_shared<store::HashStore>();
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        collectives::GroupSpec spec;
        spec.store = store;
        spec.rank = r;
        spec.size = size;
        spec.timeout = timeout;
        spec.nccl_at_init = nccl_at_init;
        auto pg = collectives::make_group(spec, cuda->devices_for_rank());
        REQUIRE(pg->backend() == CollectivesBackend::kAuto);
        fn(r, *pg);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!saved.empty()) setenv("LOCAL_RANK", saved.c_str(), 1);
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace

TEST_CASE("auto group: host buffers go to Gloo even with a GPU visible, and never touch NCCL",
          "[collectives][dispatch]") {
  // One fake GPU for two ranks: had the host buffers gone to NCCL, its
  // init would fail with "Duplicate GPU detected".
  auto cuda = std::make_shared<FakeCuda>(1);
  run_auto_ranks(cuda, 2, [&](int r, ProcessGroup& pg) {
    std::vector<float> v(1000, float(r + 1));
    pg.all_reduce({v.data(), v.size(), DataType::kFloat32}, ReduceOp::kSum)->wait();
    REQUIRE(v[999] == 3.0f);
    std::vector<float> all(2000);
    pg.all_gather({v.data(), v.size(), DataType::kFloat32}, {all.data(), all.size(), DataType::kFloat32})->wait();
    pg.barrier()->wait();
    auto sub = pg.new_group({1});
    if (r == 1) sub->all_reduce({v.data(), v.size(), DataType::kFloat32})->wait();
  });
  CHECK(cuda->comm_inits == 0);
  CHECK(cuda->collectives == 0);

  // And CUDA buffers there fail with NCCL's reason, host ones still work.
  run_auto_ranks(cuda, 2, [&](int r, ProcessGroup& pg) {
    float* d = cuda->alloc<float>(4, 0);
    CHECK_THROWS_WITH(pg.all_reduce({d, 4, DataType::kFloat32, DeviceType::kCuda}),
                      Catch::Contains("Duplicate GPU detected"));
    std::vector<int32_t> v(4, r);
    pg.all_reduce({v.data(), v.size(), DataType::kInt32})->wait();
    REQUIRE(v[0] == 1);
  });
}

TEST_CASE("auto group: CUDA buffers go to NCCL, made at the first one", "[collectives][dispatch]") {
  auto cuda = std::make_shared<FakeCuda>(2);
  run_auto_ranks(cuda, 2, [&](int r, ProcessGroup& pg) {
    std::vector<double> h(3, double(r + 1));
    pg.all_reduce({h.data(), h.size(), DataType::kFloat64}, ReduceOp::kAvg)->wait();
    REQUIRE(h[0] == 1.5);
    REQUIRE(cuda->comm_inits == 0);  // not before the first CUDA buffer
    pg.barrier()->wait();

    double* d = cuda->alloc<double>(3, r);
    std::fill(d, d + 3, double(r + 1));
    pg.all_reduce({d, 3, DataType::kFloat64, DeviceType::kCuda}, ReduceOp::kAvg)->wait();
    REQUIRE(d[2] == 1.5);
    REQUIRE(cuda->comm_inits == 2);

    // Both kinds in one program, interleaved; each backend in its order.
    auto wh = pg.all_reduce({h.data(), h.size(), DataType::kFloat64}, ReduceOp::kSum);
    auto wd = pg.all_reduce({d, 3, DataType::kFloat64, DeviceType::kCuda}, ReduceOp::kSum);
    wd->wait();
    wh->wait();
    REQUIRE(h[1] == 3.0);
    REQUIRE(d[1] == 3.0);

    // One operation runs on one backend: mixed buffers are refused.
    double* all = cuda->alloc<double>(6, r);
    CHECK_THROWS_WITH(pg.all_gather({h.data(), 3, DataType::kFloat64},
                                    {all, 6, DataType::kFloat64, DeviceType::kCuda}),
                      Catch::Contains("send is a host buffer and recv a CUDA one"));
    pg.all_gather({d, 3, DataType::kFloat64, DeviceType::kCuda},
                  {all, 6, DataType::kFloat64, DeviceType::kCuda})->wait();
    REQUIRE(all[5] == 3.0);
  });
  CHECK(cuda->comm_inits == 2);  // one communicator per rank, made once
}

TEST_CASE("auto group: a rank that skips the first CUDA operation is named, not waited for",
          "[collectives][dispatch]") {
  auto cuda = std::make_shared<FakeCuda>(2);
  run_auto_ranks(
      cuda, 2,
      [&](int r, ProcessGroup& pg) {
        if (r == 1) return;  // never passes a CUDA buffer
        float* d = cuda->alloc<float>(1, r);
        CHECK_THROWS_WITH(pg.all_reduce({d, 1, DataType::kFloat32, DeviceType::kCuda}),
                          Catch::Contains("rank(s) 1 of this group did not come"));
      },
      false, 300ms);
  CHECK(cuda->comm_inits == 0);
}

TEST_CASE("auto group: new_group splits both backends", "[collectives][dispatch]") {
  auto cuda = std::make_shared<FakeCuda>(3);
  run_auto_ranks(cuda, 3, [&](int r, ProcessGroup& pg) {
    // Before any CUDA buffer: the subgroup makes its own communicator later.
    auto early = pg.new_group({0, 2});
    float* d = cuda->alloc<float>(1, r);
    d[0] = float(r);
    pg.all_reduce({d, 1, DataType::kFloat32, DeviceType::kCuda})->wait();  // makes the parent's
    REQUIRE(d[0] == 3.0f);
    // After: split from the parent's communicator.
    auto late = pg.new_group({2, 1});
    REQUIRE(bool(early) == (r != 1));
    REQUIRE(bool(late) == (r != 0));
    std::vector<float> h(1, float(r));
    if (early) {
      REQUIRE(early->backend() == CollectivesBackend::kAuto);
      d[0] = float(r);
      early->all_reduce({d, 1, DataType::kFloat32, DeviceType::kCuda})->wait();
      REQUIRE(d[0] == 2.0f);
      early->all_reduce({h.data(), 1, DataType::kFloat32})->wait();
      REQUIRE(h[0] == 2.0f);
    }
    if (late) {
      REQUIRE(late->rank() == (r == 2 ? 0 : 1));
      d[0] = float(r);
      late->all_reduce({d, 1, DataType::kFloat32, DeviceType::kCuda})->wait();
      REQUIRE(d[0] == 3.0f);
      h[0] = float(r);
      late->all_reduce({h.data(), 1, DataType::kFloat32})->wait();
      REQUIRE(h[0] == 3.0f);
    }
  });
  CHECK(cuda->comm_inits == 3 + 2);  // the parent's three, early's two
  CHECK(cuda->comm_splits == 3);     // late's, on every parent rank
}

TEST_CASE("auto group: nccl_at_init makes the communicator at once", "[collectives][dispatch]") {
  auto cuda = std::make_shared<FakeCuda>(2);
  run_auto_ranks(
      cuda, 2,
      [&](int r, ProcessGroup& pg) {
        REQUIRE(cuda->comm_inits == 2);
        // A send/recv as the first CUDA operation works: every rank joined.
        float* d = cuda->alloc<float>(1, r);
        d[0] = 7;
        if (r == 0) pg.send({d, 1, DataType::kFloat32, DeviceType::kCuda}, 1)->wait();
        if (r == 1) {
          d[0] = 0;
          pg.recv({d, 1, DataType::kFloat32, DeviceType::kCuda}, 0)->wait();
          REQUIRE(d[0] == 7.0f);
        }
      },
      /*nccl_at_init=*/true);
}

TEST_CASE("auto group: without a GPU, CUDA buffers fail with the reason", "[collectives][dispatch]") {
  auto cuda = std::make_shared<FakeCuda>(0);
  run_auto_ranks(cuda, 1, [&](int, ProcessGroup& pg) {
    std::vector<float> h(2, 1.0f);
    pg.all_reduce({h.data(), 2, DataType::kFloat32})->wait();
    CHECK_THROWS_AS(pg.all_reduce({h.data(), 2, DataType::kFloat32, DeviceType::kCuda}),
                    NotSupportedError);
  });
  // A build without NCCL says so.
  unsetenv("LOCAL_RANK");
  collectives::GroupSpec spec;
  spec.store = std::make_shared<store::HashStore>();
  auto pg = collectives::make_group(spec, {cuda->devices_for_rank().runtime, nullptr});
  float x = 1;
  CHECK_THROWS_WITH(pg->all_reduce({&x, 1, DataType::kFloat32, DeviceType::kCuda}),
                    Catch::Contains("this build has none"));
}
