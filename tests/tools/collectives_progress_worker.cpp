// collectives_progress_worker: a training loop on ccrun's collectives for the
// hang, straggler and progress tests (tests/integration/test_hangs.py). Each
// step works for --step-ms (a sleep: a rank's own compute), marks the step
// (ccrun::progress::step) and all_reduces --count floats in the world group.
//   --sleep-rank R --sleep-before K --sleep-s S   rank R sleeps S s before step K
//   --slow-rank R --slow-ms X                     rank R works X ms per step
//   --jitter P                                    each step's work varies by up to
//                                                 +-P% (uniform, a seed per rank)
// Prints "step K" on rank 0 every 10 steps, and "done" at the end.
#include <CLI/CLI.hpp>

#include <chrono>
#include <random>
#include <cstdio>
#include <thread>
#include <vector>

#include "ccrun/collectives.h"
#include "ccrun/progress.h"

int main(int argc, char** argv) {
  CLI::App app{"collectives_progress_worker"};
  int steps = 100, sleep_rank = -1, sleep_before = 0, slow_rank = -1;
  double sleep_s = 0, step_ms = 0, slow_ms = 0;
  size_t count = 1024;
  app.add_option("--steps", steps);
  app.add_option("--count", count, "floats per all_reduce");
  app.add_option("--step-ms", step_ms, "each rank's own work per step");
  app.add_option("--sleep-rank", sleep_rank);
  app.add_option("--sleep-before", sleep_before, "the step (1-based) it sleeps before");
  app.add_option("--sleep-s", sleep_s);
  app.add_option("--slow-rank", slow_rank);
  app.add_option("--slow-ms", slow_ms, "that rank's work per step");
  double jitter = 0;
  app.add_option("--jitter", jitter, "+-percent of each step's work, uniform");
  CLI11_PARSE(app, argc, argv);

  auto pg = ccrun::init_process_group();
  std::mt19937 rng(unsigned(pg->rank()) * 7919u + 1u);
  std::uniform_real_distribution<double> vary(1 - jitter / 100, 1 + jitter / 100);
  std::vector<float> grad(count, 1.0f);
  auto work = [](double ms) {
    if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
  };
  for (int s = 1; s <= steps; ++s) {
    work((pg->rank() == slow_rank ? slow_ms : step_ms) * (jitter > 0 ? vary(rng) : 1.0));
    if (pg->rank() == sleep_rank && s == sleep_before) work(sleep_s * 1000);
    pg->all_reduce({grad.data(), grad.size(), ccrun::DataType::kFloat32})->wait();
    ccrun::progress::step();
    if (pg->rank() == 0 && s % 10 == 0) std::printf("step %d\n", s), std::fflush(stdout);
  }
  pg->barrier()->wait();
  if (pg->rank() == 0) std::printf("done\n");
  return 0;
}
