// The NCCL backend at world size 1 on one GPU: every operation. Runs only in
// builds with NCCL and on a machine with a CUDA device; otherwise it says
// that it was skipped, and why.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ccrun/collectives.h"
#include "ccrun/hash_store.h"

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
    case DataType::Int8: store(int8_t(k)); break;
    case DataType::UInt8: store(uint8_t(k)); break;
    case DataType::Int32: store(int32_t(k)); break;
    case DataType::Int64: store(int64_t(k)); break;
    case DataType::Float16: store(half[k]); break;
    case DataType::BFloat16: store(bf16[k]); break;
    case DataType::Float32: store(float(k)); break;
    case DataType::Float64: store(double(k)); break;
  }
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
  InitOptions o;
  o.backend = "nccl";
  std::string path = "/tmp/ccrun-nccl-test-" + std::to_string(getpid());
  std::remove(path.c_str());
  o.init_method = "file://" + path;
  o.rank = 0;
  o.world_size = 1;
  o.timeout = std::chrono::seconds(60);
  auto pg = init_process_group(o);
  REQUIRE(pg->backend() == "nccl");
  REQUIRE(pg->size() == 1);

  // At world size 1 every reduction (Avg included: x / 1) leaves the data
  // as it was, and every gather or scatter copies it: check each op on each
  // data type byte for byte, with counts 0, 1 and 1M+1.
  const DataType types[] = {DataType::Int8,    DataType::UInt8,    DataType::Int32,
                            DataType::Int64,   DataType::Float16,  DataType::BFloat16,
                            DataType::Float32, DataType::Float64};
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
      auto check = [&](void* where) {
        REQUIRE(cudaMemcpy(back.data(), where, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
        REQUIRE(back == pattern);
      };
      Buffer b{d, n, t, DeviceType::Cuda}, c{e, n, t, DeviceType::Cuda};
      load();
      for (auto op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
        pg->all_reduce(b, op)->wait();
        check(d);
        pg->reduce(b, 0, op)->wait();
        check(d);
        REQUIRE(cudaMemset(e, 0, bytes + 1) == cudaSuccess);
        pg->reduce_scatter(b, c, op)->wait();
        check(e);
      }
      pg->broadcast(b, 0)->wait();
      check(d);
      for (int k = 0; k < 4; ++k) {
        REQUIRE(cudaMemset(e, 0, bytes + 1) == cudaSuccess);
        if (k == 0) pg->all_gather(b, c)->wait();
        if (k == 1) pg->gather(b, c, 0)->wait();
        if (k == 2) pg->scatter(b, c, 0)->wait();
        if (k == 3) pg->all_to_all(b, c)->wait();
        check(e);
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
    pg->all_reduce({d, n, DataType::Float32, DeviceType::Cuda}, ReduceOp::Sum)->wait();
    REQUIRE(cudaMemcpy(back.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    REQUIRE(back == h);
    cudaFree(d);
  }

  // A subgroup of the one rank, and host buffers refused with the reason.
  auto sub = pg->new_group({0});
  REQUIRE(sub);
  REQUIRE(sub->size() == 1);
  sub->barrier()->wait();
  std::vector<float> host(4, 1.0f);
  REQUIRE_THROWS_AS(pg->all_reduce({host.data(), host.size(), DataType::Float32}), NotSupportedError);
  std::remove(path.c_str());
#endif
}
