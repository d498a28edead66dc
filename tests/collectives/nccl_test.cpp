// The real NCCL backend on real GPUs: every operation at world size 1 on one
// GPU, host and CUDA buffers through one default group, and all_reduce over
// every visible GPU (ranks as threads, one GPU each). Runs only in builds
// with NCCL and on a machine with enough CUDA devices; otherwise each test
// says that it was skipped, and why. scripts/gpu-check.sh runs them; CI
// drives the same group logic with a fake NCCL (nccl_group_test.cpp).
#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "ccrun/collectives.h"
#include "ccrun/hash_store.h"
#include "ccrun/prefix_store.h"
#include "dispatch_group.h"
#include "nccl_group.h"

#ifdef CCRUN_HAVE_NCCL
#include <cuda_runtime.h>
#endif

using namespace ccrun;

#ifdef CCRUN_HAVE_NCCL
namespace {
// Writes the whole number k (0..4) as one element of type t.
void put(DataType t, unsigned char* dst, int k) {
  static const uint16_t half[] = {0x0000, 0x3C00, 0x4000, 0x4200, 0x4400};
  static const uint16_t bf16[] = {0x0000, 0x3F80, 0x4000, 0x4040, 0x4080};
  auto store = [&](auto v) { std::memcpy(dst, &v, sizeof v); };
  switch (t) {
    case DataType::kInt8: store(int8_t(k)); break;
    case DataType::kUInt8: store(uint8_t(k)); break;
    case DataType::kInt32: store(int32_t(k)); break;
    case DataType::kInt64: store(int64_t(k)); break;
    case DataType::kFloat16: store(half[k]); break;
    case DataType::kBFloat16: store(bf16[k]); break;
    case DataType::kFloat32: store(float(k)); break;
    case DataType::kFloat64: store(double(k)); break;
  }
}

// Fails naming the operation and the first differing element, instead of
// letting Catch2 print two multi-megabyte vectors.
void require_same_bytes(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want,
                        size_t elem, const std::string& what) {
  if (got == want) return;
  std::ostringstream m;
  m << what << ": ";
  if (got.size() != want.size()) {
    m << "got " << got.size() << " bytes, want " << want.size();
  } else {
    size_t byte = size_t(std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin());
    size_t i = byte / elem;
    size_t diff = 0;
    for (size_t k = 0; k < got.size(); ++k) diff += got[k] != want[k];
    m << "element " << i << " of " << want.size() / elem << " differs (" << diff
      << " bytes differ in all); got bytes";
    char hex[4];
    for (size_t k = i * elem; k < (i + 1) * elem; ++k) {
      std::snprintf(hex, sizeof hex, " %02x", got[k]);
      m << hex;
    }
    m << ", want";
    for (size_t k = i * elem; k < (i + 1) * elem; ++k) {
      std::snprintf(hex, sizeof hex, " %02x", want[k]);
      m << hex;
    }
  }
  FAIL(m.str());
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "Sum";
    case ReduceOp::kProd: return "Prod";
    case ReduceOp::kMin: return "Min";
    case ReduceOp::kMax: return "Max";
    case ReduceOp::kAvg: return "Avg";
  }
  return "?";
}

// A group of one (rank 0 of 1) on `backend`, over a fresh file:// store at
// `path` (the caller removes it when done).
std::shared_ptr<ProcessGroup> world_of_one(CollectivesBackend backend, const std::string& path) {
  InitOptions o;
  o.backend = backend;
  std::remove(path.c_str());
  o.init_method = "file://" + path;
  o.rank = 0;
  o.world_size = 1;
  o.timeout = std::chrono::seconds(60);
  return init_process_group(o);
}
}  // namespace
#endif

TEST_CASE("nccl: every operation at world size 1", "[collectives][nccl]") {
#ifndef CCRUN_HAVE_NCCL
  WARN("skipped: this build has no NCCL backend (CUDA and NCCL were not found)");
  return;
#else
  if (!nccl_available()) {
    WARN("skipped: the NCCL backend is built, but no CUDA device is visible here");
    return;
  }
  std::string path = "/tmp/ccrun-nccl-test-" + std::to_string(getpid());
  auto pg = world_of_one(CollectivesBackend::kNccl, path);
  REQUIRE(pg->backend() == CollectivesBackend::kNccl);
  REQUIRE(pg->size() == 1);

  // At world size 1 every reduction (Avg included: x / 1) leaves the data
  // as it was, and every gather or scatter copies it: check each op on each
  // data type byte for byte, with counts 0, 1 and 1M+1.
  const DataType types[] = {DataType::kInt8,    DataType::kUInt8,    DataType::kInt32,
                            DataType::kInt64,   DataType::kFloat16,  DataType::kBFloat16,
                            DataType::kFloat32, DataType::kFloat64};
  for (DataType t : types) {
    for (size_t n : {size_t(0), size_t(1), size_t(1'000'001)}) {
      INFO("dtype " << int(t) << " count " << n);
      const size_t bytes = n * element_size(t);
      std::vector<unsigned char> pattern(bytes), back(bytes);
      // Small whole numbers, normal values in every type (no subnormals a
      // flush-to-zero kernel could change, no NaNs).
      for (size_t i = 0; i < n; ++i) put(t, pattern.data() + i * element_size(t), int(i / 7 % 5));
      void *d = nullptr, *e = nullptr;
      REQUIRE(cudaMalloc(&d, bytes + 1) == cudaSuccess);
      REQUIRE(cudaMalloc(&e, bytes + 1) == cudaSuccess);
      auto load = [&] { REQUIRE(cudaMemcpy(d, pattern.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess); };
      auto check = [&](void* where, const std::string& what) {
        REQUIRE(cudaMemcpy(back.data(), where, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
        require_same_bytes(back, pattern, element_size(t),
                           what + " dtype " + std::to_string(int(t)) + " count " + std::to_string(n));
      };
      Buffer b{d, n, t, DeviceType::kCuda}, c{e, n, t, DeviceType::kCuda};
      load();
      for (auto op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
        pg->all_reduce(b, op)->wait();
        check(d, std::string("all_reduce ") + op_name(op));
        pg->reduce(b, 0, op)->wait();
        check(d, std::string("reduce ") + op_name(op));
        // Out of place into zeros: an element NCCL leaves unwritten shows
        // (NCCL's one-rank Avg kernel leaves the last of 1,000,001 float64
        // unwritten; docs/collectives.md).
        REQUIRE(cudaMemset(e, 0, bytes + 1) == cudaSuccess);
        pg->reduce_scatter(b, c, op)->wait();
        check(e, std::string("reduce_scatter ") + op_name(op));
      }
      pg->broadcast(b, 0)->wait();
      check(d, "broadcast");
      for (int k = 0; k < 4; ++k) {
        REQUIRE(cudaMemset(e, 0, bytes + 1) == cudaSuccess);
        if (k == 0) pg->all_gather(b, c)->wait();
        if (k == 1) pg->gather(b, c, 0)->wait();
        if (k == 2) pg->scatter(b, c, 0)->wait();
        if (k == 3) pg->all_to_all(b, c)->wait();
        check(e, k == 0 ? "all_gather" : k == 1 ? "gather" : k == 2 ? "scatter" : "all_to_all");
      }
      auto w = pg->barrier();
      REQUIRE(w->wait_for(std::chrono::seconds(30)));
      REQUIRE(w->is_completed());
      cudaFree(d);
      cudaFree(e);
    }
  }

  // A kernel-free producer on the default stream: the copy must land before
  // the all_reduce reads the buffer (the group's stream waits for it).
  {
    const size_t n = 1 << 20;
    std::vector<float> h(n, 3.0f), back(n);
    float* d = nullptr;
    REQUIRE(cudaMalloc(&d, n * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMemcpyAsync(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, 0) == cudaSuccess);
    pg->all_reduce({d, n, DataType::kFloat32, DeviceType::kCuda}, ReduceOp::kSum)->wait();
    REQUIRE(cudaMemcpy(back.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(std::count(back.begin(), back.end(), 3.0f) == long(n));
    cudaFree(d);
  }

  // A subgroup of the one rank, and host buffers refused with the reason.
  auto sub = pg->new_group({0});
  REQUIRE(sub);
  REQUIRE(sub->size() == 1);
  sub->barrier()->wait();
  std::vector<float> host(4, 1.0f);
  REQUIRE_THROWS_AS(pg->all_reduce({host.data(), host.size(), DataType::kFloat32}), NotSupportedError);
  std::remove(path.c_str());
#endif
}

TEST_CASE("nccl: the default group takes host and CUDA buffers in one program",
          "[collectives][nccl]") {
#ifndef CCRUN_HAVE_NCCL
  WARN("skipped: this build has no NCCL backend (CUDA and NCCL were not found)");
#else
  if (!nccl_available()) {
    WARN("skipped: the NCCL backend is built, but no CUDA device is visible here");
    return;
  }
  std::string path = "/tmp/ccrun-nccl-auto-test-" + std::to_string(getpid());
  auto pg = world_of_one(CollectivesBackend::kAuto, path);
  REQUIRE(pg->backend() == CollectivesBackend::kAuto);
  std::vector<float> host(1000, 2.0f);
  pg->all_reduce({host.data(), host.size(), DataType::kFloat32}, ReduceOp::kSum)->wait();
  CHECK(host[999] == 2.0f);
  float* d = nullptr;
  REQUIRE(cudaMalloc(&d, host.size() * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  pg->all_reduce({d, host.size(), DataType::kFloat32, DeviceType::kCuda}, ReduceOp::kAvg)->wait();
  std::vector<float> back(host.size());
  REQUIRE(cudaMemcpy(back.data(), d, back.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == host);
  pg->barrier()->wait();
  cudaFree(d);
  std::remove(path.c_str());
#endif
}

TEST_CASE("nccl: all_reduce, all_gather and reduce_scatter over every visible GPU",
          "[collectives][nccl]") {
#ifndef CCRUN_HAVE_NCCL
  WARN("skipped: this build has no NCCL backend (CUDA and NCCL were not found)");
#else
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 2) {
    WARN("skipped: needs 2 or more CUDA devices, " << gpus << " visible");
    return;
  }
  // Ranks as threads, rank r on cuda:r (no LOCAL_RANK: rank modulo devices).
  unsetenv("LOCAL_RANK");
  auto store = std::make_shared<store::HashStore>();
  const size_t n = 1'000'003;
  std::vector<std::string> errors(static_cast<size_t>(gpus));
  std::vector<std::thread> threads;
  for (int r = 0; r < gpus; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto pg = collectives::create_nccl_group(store, r, gpus, std::chrono::seconds(60),
                                                 collectives::default_devices());
        cudaSetDevice(r);
        double* d = nullptr;
        double* all = nullptr;
        if (cudaMalloc(&d, n * sizeof(double)) != cudaSuccess ||
            cudaMalloc(&all, n * gpus * sizeof(double)) != cudaSuccess) {
          throw std::runtime_error("cudaMalloc failed");
        }
        std::vector<double> h(n, double(r + 1)), back(n), gathered(n * gpus);
        cudaMemcpy(d, h.data(), n * sizeof(double), cudaMemcpyHostToDevice);
        pg->all_reduce({d, n, DataType::kFloat64, DeviceType::kCuda}, ReduceOp::kAvg)->wait();
        cudaMemcpy(back.data(), d, n * sizeof(double), cudaMemcpyDeviceToHost);
        const double avg = (gpus + 1) / 2.0;
        auto bad = std::find_if(back.begin(), back.end(), [&](double v) { return v != avg; });
        if (bad != back.end()) {
          throw std::runtime_error("all_reduce Avg: element " + std::to_string(bad - back.begin()) +
                                   " is " + std::to_string(*bad) + ", want " + std::to_string(avg));
        }
        pg->all_gather({d, n, DataType::kFloat64, DeviceType::kCuda},
                       {all, n * gpus, DataType::kFloat64, DeviceType::kCuda})->wait();
        pg->reduce_scatter({all, n * gpus, DataType::kFloat64, DeviceType::kCuda},
                           {d, n, DataType::kFloat64, DeviceType::kCuda}, ReduceOp::kAvg)->wait();
        cudaMemcpy(back.data(), d, n * sizeof(double), cudaMemcpyDeviceToHost);
        bad = std::find_if(back.begin(), back.end(), [&](double v) { return v != avg; });
        if (bad != back.end()) {
          throw std::runtime_error("reduce_scatter Avg: element " + std::to_string(bad - back.begin()) +
                                   " is " + std::to_string(*bad) + ", want " + std::to_string(avg));
        }
        cudaFree(d);
        cudaFree(all);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < gpus; ++r) {
    INFO("rank " << r);
    CHECK(errors[size_t(r)] == "");
  }
#endif
}
