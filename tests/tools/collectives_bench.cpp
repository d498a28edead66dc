// collectives_bench: timing of all_reduce, all_gather, reduce_scatter and
// broadcast (float32) from 4 B to 64 MiB, run under ccrun. Rank 0 prints one
// JSON line per (op, size) with the median and the mean time per call.
//
//   ccrun --nproc-per-node 4 --no-python build/tests/collectives_bench [max_bytes]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ccrun/collectives.h"

using namespace ccrun;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  size_t max_bytes = argc > 1 ? std::stoull(argv[1]) : (64u << 20);
  auto pg = init_process_group();
  int n = pg->size();
  // Buffers for the largest size, allocated and touched once: freeing and
  // faulting in tens of MiB between sizes made the next small size's
  // timings swing.
  const size_t max_count = std::max<size_t>(max_bytes / 4, 1);
  std::vector<float> big_buf(max_count + n, 1.0f), small_buf(max_count, 1.0f), buf(max_count, 1.0f);
  for (const std::string op : {"all_reduce", "all_gather", "reduce_scatter", "broadcast"}) {
    for (size_t bytes = 4; bytes <= max_bytes; bytes *= 16) {
      // `bytes` is the larger buffer (nccl-tests' size): the output of
      // all_gather, the input of reduce_scatter.
      size_t count = std::max<size_t>(bytes / 4, 1);
      size_t part = std::max<size_t>(count / n, 1);
      float* big = big_buf.data();  // part * n elements
      float* small = small_buf.data();  // part elements
      auto once = [&] {
        if (op == "all_reduce") pg->all_reduce({buf.data(), count, DataType::kFloat32})->wait();
        if (op == "broadcast") pg->broadcast({buf.data(), count, DataType::kFloat32}, 0)->wait();
        if (op == "all_gather") {
          pg->all_gather({small, part, DataType::kFloat32}, {big, part * n, DataType::kFloat32})->wait();
        }
        if (op == "reduce_scatter") {
          pg->reduce_scatter({big, part * n, DataType::kFloat32}, {small, part, DataType::kFloat32})->wait();
        }
      };
      int iters = int(std::max<size_t>(3, std::min<size_t>(200, (size_t(64) << 20) / bytes)));
      // Warm-up half as long as the run: the first calls after a change of
      // size pay for the scheduler and the sockets settling.
      for (int i = 0; i < std::max(2, iters / 2); ++i) once();
      pg->barrier()->wait();
      // Each call timed on its own: on shared cores a few calls wait
      // milliseconds for the scheduler, which moves a mean of 200 calls of
      // 100 us by a third; the median is the typical call.
      std::vector<double> us(iters);
      for (int i = 0; i < iters; ++i) {
        auto t0 = Clock::now();
        once();
        us[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      }
      double mean = 0;
      for (double u : us) mean += u / iters;
      std::nth_element(us.begin(), us.begin() + iters / 2, us.end());
      if (pg->rank() == 0) {
        std::printf("{\"op\":\"%s\",\"bytes\":%zu,\"ranks\":%d,\"us\":%.2f,\"mean_us\":%.2f}\n",
                    op.c_str(), bytes, n, us[iters / 2], mean);
        std::fflush(stdout);
      }
    }
  }
  pg->barrier()->wait();
  return 0;
}
