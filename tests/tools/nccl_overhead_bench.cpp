// nccl_overhead_bench: what a ccrun all_reduce costs over the raw NCCL call
// at world size 1 on one GPU, float32 from 4 B to 64 MiB. Both sides issue
// one call and wait for it (ccrun: Work::wait; raw: ncclAllReduce on a
// stream of its own, then cudaStreamSynchronize), so the difference is
// ccrun's own path: argument checks, Work and event, stream handoff. ccrun
// is timed twice: through a CollectivesBackend::kNccl group ("ccrun_us") and through the
// default group, which routes the CUDA buffer to its NCCL side ("auto_us").
// One JSON line per size. Exits 77 (skipped) without NCCL or a CUDA device.
//
//   scripts/bench-nccl-overhead.sh            (or run it directly)
//   build/tests/nccl_overhead_bench [max_bytes]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <unistd.h>

#include "ccrun/collectives.h"

#ifdef CCRUN_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
#ifndef CCRUN_HAVE_NCCL
  std::fprintf(stderr, "nccl_overhead_bench: skipped: this build has no NCCL backend\n");
  (void)argc;
  (void)argv;
  return 77;
#else
  if (!ccrun::nccl_available()) {
    std::fprintf(stderr, "nccl_overhead_bench: skipped: no CUDA device is visible\n");
    return 77;
  }
  auto fail = [](const char* what, const char* why) {
    std::fprintf(stderr, "nccl_overhead_bench: %s failed: %s\n", what, why);
    return 1;
  };
  ccrun::InitOptions o;
  o.backend = ccrun::CollectivesBackend::kNccl;
  std::string path = "/tmp/ccrun-nccl-overhead-" + std::to_string(getpid());
  std::remove(path.c_str());
  o.init_method = "file://" + path;
  o.rank = 0;
  o.world_size = 1;
  auto pg = ccrun::init_process_group(o);
  ccrun::InitOptions ao = o;
  ao.backend = ccrun::CollectivesBackend::kAuto;
  std::string auto_path = path + "-auto";
  std::remove(auto_path.c_str());
  ao.init_method = "file://" + auto_path;
  auto auto_pg = ccrun::init_process_group(ao);

  ncclUniqueId id;
  ncclComm_t comm;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return fail("ncclGetUniqueId", ncclGetErrorString(r));
  if (ncclResult_t r = ncclCommInitRank(&comm, 1, id, 0); r != ncclSuccess) return fail("ncclCommInitRank", ncclGetErrorString(r));
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  const size_t max_bytes = argc > 1 ? std::stoull(argv[1]) : size_t(64) << 20;
  float* d = nullptr;
  if (cudaError_t e = cudaMalloc(&d, max_bytes); e != cudaSuccess) return fail("cudaMalloc", cudaGetErrorString(e));

  for (size_t bytes = 4; bytes <= max_bytes; bytes *= 16) {
    const size_t count = bytes / 4;
    const int iters = 1000;
    auto raw = [&] {
      ncclAllReduce(d, d, count, ncclFloat32, ncclSum, comm, stream);
      cudaStreamSynchronize(stream);
    };
    auto ours = [&] { pg->all_reduce({d, count, ccrun::DataType::kFloat32, ccrun::DeviceType::kCuda})->wait(); };
    auto by_auto = [&] {
      auto_pg->all_reduce({d, count, ccrun::DataType::kFloat32, ccrun::DeviceType::kCuda})->wait();
    };
    auto time = [&](auto&& once) {
      for (int i = 0; i < iters / 10; ++i) once();
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) once();
      return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
    };
    // Alternate and keep each side's best of three, as the CPU benchmark.
    double best_raw = 1e30, best_ours = 1e30, best_auto = 1e30;
    for (int round = 0; round < 3; ++round) {
      best_raw = std::min(best_raw, time(raw));
      best_ours = std::min(best_ours, time(ours));
      best_auto = std::min(best_auto, time(by_auto));
    }
    std::printf("{\"bytes\":%zu,\"raw_us\":%.2f,\"ccrun_us\":%.2f,\"overhead_us\":%.2f,"
                "\"auto_us\":%.2f,\"auto_overhead_us\":%.2f}\n",
                bytes, best_raw, best_ours, best_ours - best_raw, best_auto, best_auto - best_raw);
    std::fflush(stdout);
  }
  cudaFree(d);
  cudaStreamDestroy(stream);
  ncclCommDestroy(comm);
  std::remove(path.c_str());
  std::remove(auto_path.c_str());
  return 0;
#endif
}
