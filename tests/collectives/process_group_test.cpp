// The Gloo process group with ranks as threads over one HashStore (as Gloo's
// own tests do): every operation, data type and reduce op against references
// computed here, world sizes 1 to 8, timeouts and subgroups.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <thread>

#include "ccrun/collectives.h"
#include "ccrun/hash_store.h"
#include "ccrun/prefix_store.h"

using namespace ccrun;
using namespace std::chrono_literals;

namespace {

// Runs fn(group) on `size` ranks at once; rethrows the first failure.
void run_ranks(int size, const std::function<void(ProcessGroup&)>& fn,
               std::chrono::milliseconds timeout = 20s) {
  static int job = 0;
  auto base = std::make_shared<store::HashStore>();
  auto store = std::make_shared<store::PrefixStore>("job" + std::to_string(++job), base);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(size);
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto pg = create_gloo_group(store, r, size, timeout);
        fn(*pg);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

template <typename T>
Buffer buf(std::vector<T>& v, DataType t) { return Buffer{v.data(), v.size(), t}; }

// The value rank r contributes at index i (small, exact in every type).
double value(int r, size_t i) { return double((r + 1) * 2 + int(i % 3)); }

// The reduction computed in T itself (8-bit products wrap, as on the wire).
template <typename T>
double reference(ReduceOp op, int size, size_t i) {
  using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
  T acc = T(value(0, i));
  for (int r = 1; r < size; ++r) {
    T v = T(value(r, i));
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg: acc = T(Acc(acc) + Acc(v)); break;
      case ReduceOp::kProd: acc = T(Acc(acc) * Acc(v)); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  if (op == ReduceOp::kAvg) return std::is_integral_v<T> ? double(T(Acc(acc) / size)) : double(acc) / size;
  return double(acc);
}

template <typename T>
void all_reduce_case(DataType dt, ReduceOp op, int size, size_t n) {
  run_ranks(size, [&](ProcessGroup& pg) {
    std::vector<T> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = T(value(pg.rank(), i));
    pg.all_reduce(buf(v, dt), op)->wait();
    for (size_t i = 0; i < n; ++i) {
      double want = reference<T>(op, size, i);
      double got = double(v[i]);
      REQUIRE(std::abs(got - want) <= 0.01 * std::abs(want) + 1e-6);
    }
  });
}

}  // namespace

TEST_CASE("all_reduce: every numeric type and reduce op, sizes 1 to 4", "[collectives]") {
  for (int size : {1, 2, 3, 4}) {
    for (auto op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
      all_reduce_case<int8_t>(DataType::kInt8, op, size, 5);
      all_reduce_case<uint8_t>(DataType::kUInt8, op, size, 5);
      all_reduce_case<int32_t>(DataType::kInt32, op, size, 7);
      all_reduce_case<int64_t>(DataType::kInt64, op, size, 7);
      all_reduce_case<float>(DataType::kFloat32, op, size, 7);
      all_reduce_case<double>(DataType::kFloat64, op, size, 7);
    }
  }
}

TEST_CASE("all_reduce: float16 and bfloat16 reduce in float, rounded back", "[collectives]") {
  // 1.0 in half precision is 0x3c00; in bfloat16 0x3f80. 3 ranks sum to 3.0.
  run_ranks(3, [](ProcessGroup& pg) {
    std::vector<uint16_t> h(4, 0x3c00), b(4, 0x3f80);
    pg.all_reduce({h.data(), h.size(), DataType::kFloat16})->wait();
    pg.all_reduce({b.data(), b.size(), DataType::kBFloat16})->wait();
    for (auto x : h) REQUIRE(x == 0x4200);  // 3.0 in half
    for (auto x : b) REQUIRE(x == 0x4040);  // 3.0 in bfloat16
  });
}

TEST_CASE("all_reduce: counts 0, 1 and 1M+1, world size 8", "[collectives]") {
  run_ranks(8, [](ProcessGroup& pg) {
    std::vector<float> empty;
    pg.all_reduce({empty.data(), 0, DataType::kFloat32})->wait();
    std::vector<float> one{1.0f};
    pg.all_reduce({one.data(), 1, DataType::kFloat32})->wait();
    REQUIRE(one[0] == 8.0f);
  });
  run_ranks(2, [](ProcessGroup& pg) {
    std::vector<float> big(1'000'001, float(pg.rank() + 1));
    pg.all_reduce({big.data(), big.size(), DataType::kFloat32})->wait();
    REQUIRE(big.front() == 3.0f);
    REQUIRE(big.back() == 3.0f);
  });
}

TEST_CASE("broadcast, reduce, all_gather, gather, scatter, reduce_scatter", "[collectives]") {
  for (int size : {1, 2, 3, 4}) {
    run_ranks(size, [size](ProcessGroup& pg) {
      int r = pg.rank();
      for (int root = 0; root < size; ++root) {
        std::vector<int32_t> v(3, r == root ? 42 : r);
        pg.broadcast({v.data(), 3, DataType::kInt32}, root)->wait();
        REQUIRE(v == std::vector<int32_t>(3, 42));

        std::vector<int64_t> red(2, r + 1);
        pg.reduce({red.data(), 2, DataType::kInt64}, root, ReduceOp::kSum)->wait();
        REQUIRE(red[0] == (r == root ? size * (size + 1) / 2 : r + 1));

        std::vector<double> mine(2, r), gathered(r == root ? 2 * size : 0);
        pg.gather({mine.data(), 2, DataType::kFloat64}, {gathered.data(), gathered.size(), DataType::kFloat64}, root)->wait();
        if (r == root) {
          for (int i = 0; i < size; ++i) REQUIRE(gathered[2 * i + 1] == i);
        }

        std::vector<float> parts(r == root ? 2 * size : 0), got(2, -1);
        for (size_t i = 0; i < parts.size(); ++i) parts[i] = float(i / 2);
        pg.scatter({parts.data(), parts.size(), DataType::kFloat32}, {got.data(), 2, DataType::kFloat32}, root)->wait();
        REQUIRE(got == std::vector<float>(2, float(r)));
      }
      std::vector<int32_t> mine{r, r * 10}, all(2 * size);
      pg.all_gather({mine.data(), 2, DataType::kInt32}, {all.data(), all.size(), DataType::kInt32})->wait();
      for (int i = 0; i < size; ++i) REQUIRE((all[2 * i] == i && all[2 * i + 1] == 10 * i));

      std::vector<float> send(3 * size), recv(3);
      for (size_t i = 0; i < send.size(); ++i) send[i] = float(i);
      pg.reduce_scatter({send.data(), send.size(), DataType::kFloat32}, {recv.data(), 3, DataType::kFloat32})->wait();
      for (int i = 0; i < 3; ++i) REQUIRE(recv[i] == float((3 * r + i) * size));
    });
  }
}

TEST_CASE("reduce_scatter: parts larger than a ring segment, odd sizes, input unchanged", "[collectives]") {
  // 300001 floats per part: three 512 KiB segments, the last one short.
  const size_t part = 300'001;
  for (int size : {2, 3, 5}) {
    run_ranks(size, [&](ProcessGroup& pg) {
      int r = pg.rank();
      std::vector<float> send(part * size), recv(part, -1.0f);
      for (size_t i = 0; i < send.size(); ++i) send[i] = float((i % 1000) * (r + 1));
      const auto before = send;
      pg.reduce_scatter({send.data(), send.size(), DataType::kFloat32},
                        {recv.data(), part, DataType::kFloat32}, ReduceOp::kAvg)->wait();
      const float scale = float(size + 1) / 2;  // mean of 1..size
      for (size_t i = 0; i < part; ++i) {
        size_t g = r * part + i;
        REQUIRE(recv[i] == Approx(float(g % 1000) * scale));
      }
      REQUIRE(send == before);
    });
  }
}

TEST_CASE("all_to_all: equal and uneven splits, counts of 0", "[collectives]") {
  for (int size : {1, 2, 3, 4}) {
    run_ranks(size, [size](ProcessGroup& pg) {
      int r = pg.rank();
      std::vector<int32_t> send(2 * size), recv(2 * size);
      for (int i = 0; i < 2 * size; ++i) send[i] = 100 * r + i;
      pg.all_to_all({send.data(), send.size(), DataType::kInt32}, {recv.data(), recv.size(), DataType::kInt32})->wait();
      for (int src = 0; src < size; ++src) {
        REQUIRE(recv[2 * src] == 100 * src + 2 * r);
        REQUIRE(recv[2 * src + 1] == 100 * src + 2 * r + 1);
      }
      // Uneven: rank r sends (r + dst) % 2 elements to dst, all equal to r.
      std::vector<size_t> sc(size), rc(size);
      size_t st = 0, rt = 0;
      for (int d = 0; d < size; ++d) {
        sc[d] = (r + d) % 2;
        rc[d] = (d + r) % 2;
        st += sc[d];
        rt += rc[d];
      }
      std::vector<int32_t> us(st, r), ur(rt, -1);
      pg.all_to_all({us.data(), st, DataType::kInt32}, sc, {ur.data(), rt, DataType::kInt32}, rc)->wait();
      size_t at = 0;
      for (int src = 0; src < size; ++src) {
        for (size_t k = 0; k < rc[src]; ++k) REQUIRE(ur[at++] == src);
      }
    });
  }
}

TEST_CASE("send, recv and barrier", "[collectives]") {
  run_ranks(3, [](ProcessGroup& pg) {
    int r = pg.rank();
    std::vector<int64_t> v(4, r);
    if (r == 0) {
      pg.send({v.data(), 4, DataType::kInt64}, 1, 7)->wait();
    } else if (r == 1) {
      pg.recv({v.data(), 4, DataType::kInt64}, 0, 7)->wait();
      REQUIRE(v == std::vector<int64_t>(4, 0));
    }
    pg.barrier()->wait();
  });
}

TEST_CASE("subgroups: members get a group, others nullptr", "[collectives]") {
  run_ranks(4, [](ProcessGroup& pg) {
    auto sub = pg.new_group({1, 3});
    if (pg.rank() == 1 || pg.rank() == 3) {
      REQUIRE(sub);
      REQUIRE(sub->size() == 2);
      std::vector<int32_t> v{pg.rank()};
      sub->all_reduce({v.data(), 1, DataType::kInt32})->wait();
      REQUIRE(v[0] == 4);
    } else {
      REQUIRE_FALSE(sub);
    }
  });
}

TEST_CASE("a rank that never calls: the others time out, then the group stays failed", "[collectives]") {
  // Rank 1 stays alive (its connections open) until rank 0 has checked
  // everything, however long the timeout takes on a loaded machine.
  std::promise<void> rank0_checked;
  std::shared_future<void> checked = rank0_checked.get_future().share();
  run_ranks(2, [&](ProcessGroup& pg) {
    if (pg.rank() == 1) {  // alive, but never calls all_reduce
      checked.wait_for(60s);
      return;
    }
    struct Done {  // set however rank 0 ends, a failed REQUIRE included
      std::promise<void>& promise;
      ~Done() { promise.set_value(); }
    } done{rank0_checked};
    std::vector<float> v(4, 1.0f);
    auto work = pg.all_reduce({v.data(), 4, DataType::kFloat32});
    REQUIRE_FALSE(work->wait_for(100ms));  // not done, and no hang
    try {
      work->wait();
      FAIL("all_reduce returned");
    } catch (const ccrun::TimeoutError& e) {
      REQUIRE_THAT(e.what(), Catch::Contains("all_reduce on group [0,1] rank 0: timed out after 1500ms"));
    }
    REQUIRE_THROWS_WITH(pg.barrier()->wait(), Catch::Contains("failed earlier"));
  }, 1500ms);
}

TEST_CASE("a rank that goes away mid-job: the others fail, no hang", "[collectives]") {
  run_ranks(2, [](ProcessGroup& pg) {
    if (pg.rank() == 1) return;  // its group (and connections) end here
    std::vector<float> v(4, 1.0f);
    REQUIRE_THROWS_WITH(pg.all_reduce({v.data(), 4, DataType::kFloat32})->wait(),
                        Catch::Contains("all_reduce on group [0,1] rank 0"));
  }, 10s);
}

TEST_CASE("wrong sizes and CUDA buffers are refused at once", "[collectives]") {
  run_ranks(2, [](ProcessGroup& pg) {
    std::vector<float> a(2), b(3);
    REQUIRE_THROWS_WITH(pg.all_gather({a.data(), 2, DataType::kFloat32}, {b.data(), 3, DataType::kFloat32}),
                        Catch::Contains("recv holds 3 elements; it must hold 4"));
    REQUIRE_THROWS_AS(pg.all_reduce({a.data(), 2, DataType::kFloat32, DeviceType::kCuda}),
                      ccrun::NotSupportedError);
    REQUIRE_THROWS_WITH(pg.broadcast({a.data(), 2, DataType::kFloat32}, 5), Catch::Contains("outside the group"));
  });
}
