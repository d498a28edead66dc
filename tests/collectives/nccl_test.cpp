// The NCCL backend at world size 1 on one GPU: every operation. Runs only in
// builds with NCCL and on a machine with a CUDA device; otherwise it says
// that it was skipped, and why.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdio>

#include "ccrun/collectives.h"
#include "ccrun/hash_store.h"

#ifdef CCRUN_HAVE_NCCL
#include <cuda_runtime.h>
#endif

using namespace ccrun;

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
  const size_t n = 1000;
  float* d = nullptr;
  float* e = nullptr;
  REQUIRE(cudaMalloc(&d, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&e, n * sizeof(float)) == cudaSuccess);
  std::vector<float> h(n, 2.0f), back(n);
  cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  Buffer b{d, n, DataType::Float32, DeviceType::Cuda}, c{e, n, DataType::Float32, DeviceType::Cuda};
  for (auto op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
    pg->all_reduce(b, op)->wait();
  }
  pg->broadcast(b, 0)->wait();
  pg->reduce(b, 0)->wait();
  pg->all_gather(b, c)->wait();
  pg->reduce_scatter(b, c)->wait();
  pg->gather(b, c, 0)->wait();
  pg->scatter(b, c, 0)->wait();
  pg->all_to_all(b, c)->wait();
  pg->barrier()->wait();
  cudaMemcpy(back.data(), e, n * sizeof(float), cudaMemcpyDeviceToHost);
  REQUIRE(back == h);  // world size 1: every op leaves the values as they were
  REQUIRE_THROWS_AS(pg->all_reduce({h.data(), n, DataType::Float32}), NotSupportedError);
  cudaFree(d);
  cudaFree(e);
  std::remove(path.c_str());
#endif
}
