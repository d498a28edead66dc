// collectives_queued_worker: a rank whose collective calls return once
// queued, as an NCCL call through torch does, for the hang tests
// (tests/integration/test_hangs.py). What a machine with one GPU cannot show
// of NCCL with several ranks (one GPU runs one NCCL rank), on CPU:
//
// Each call is recorded in the world group's slot as issued and returned at
// once (GroupProgress, the record's writer of ccrun's collectives; the start-up
// hook writes torch's NCCL calls the same way), and the rank then waits
// outside any call for the "GPU" to run it, as torch.cuda.synchronize() does.
// The GPU is the job's store: call K runs once every rank queued it with the
// same op and element count, and never when they queued different calls (a
// desync leaves NCCL's kernels waiting for each other).
//   --steps N --count C                 N all_reduce calls of C floats, a step each
//   --skip-rank R --skip-at K           rank R never issues call K (it sleeps there)
//   --barrier-rank R --barrier-at K     rank R issues barrier as call K
//   --count-rank R --count-at K --other-count C2   rank R's call K has C2 elements
// Prints "step K" on rank 0 every 10 steps, and "done" at the end.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "ccrun/job_store_env.h"
#include "ccrun/prefix_store.h"
#include "ccrun/progress.h"
#include "ccrun/store_address.h"
#include "progress_writer.h"

namespace {

using ccrun::progress::Op;

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v) {
    std::fprintf(stderr, "collectives_queued_worker: %s is not set: run it under ccrun\n", name);
    std::exit(2);
  }
  return std::atoi(v);
}

// The job's store (the agent's), under a prefix of this attempt's own.
std::shared_ptr<ccrun::store::Store> job_store() {
  auto js = ccrun::worker_env::job_store();
  if (!js) {
    std::fprintf(stderr, "collectives_queued_worker: no job store advertised: run it under ccrun\n");
    std::exit(2);
  }
  ccrun::store::OpenStoreOptions o;
  o.timeout = std::chrono::hours(1);  // the "GPU" may take for ever: the hang under test
  auto tcp = ccrun::store::open_store(ccrun::store::tcp_address(js->endpoint), o);
  return std::make_shared<ccrun::store::PrefixStore>(
      "queued_worker/" + js->run_id + "/" + std::to_string(js->attempt), tcp);
}

// The shape of a call, as the "GPU" compares them: "op:count".
std::string shape(Op op, uint64_t count) {
  return std::to_string(uint32_t(op)) + ":" + std::to_string(count);
}

}  // namespace

static int run(int argc, char** argv) {
  CLI::App app{"collectives_queued_worker"};
  int steps = 40, skip_rank = -1, skip_at = 0, barrier_rank = -1, barrier_at = 0;
  int count_rank = -1, count_at = 0;
  uint64_t count = 1024, other_count = 0;
  app.add_option("--steps", steps);
  app.add_option("--count", count, "floats per all_reduce");
  app.add_option("--skip-rank", skip_rank);
  app.add_option("--skip-at", skip_at, "the call (1-based) it never issues");
  app.add_option("--barrier-rank", barrier_rank);
  app.add_option("--barrier-at", barrier_at, "the call it issues as a barrier");
  app.add_option("--count-rank", count_rank);
  app.add_option("--count-at", count_at, "the call it issues with --other-count elements");
  app.add_option("--other-count", other_count);
  CLI11_PARSE(app, argc, argv);

  const int rank = env_int("RANK"), size = env_int("WORLD_SIZE");
  auto store = job_store();
  ccrun::collectives::GroupProgress world;
  world.open(ccrun::collectives::kWorldGroupId, uint32_t(size));
  for (int k = 1; k <= steps; ++k) {
    if (rank == skip_rank && k == skip_at) std::this_thread::sleep_for(std::chrono::hours(1));
    Op op = rank == barrier_rank && k == barrier_at ? Op::kBarrier : Op::kAllReduce;
    uint64_t n = op == Op::kBarrier ? 0 : rank == count_rank && k == count_at ? other_count : count;
    world.issue(op, n).complete();  // queued: the call returns
    // torch.cuda.synchronize(): until every rank queued call k, for ever if they differ.
    std::string call = "call/" + std::to_string(k) + "/";
    store->set(call + std::to_string(rank), shape(op, n));
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back(call + std::to_string(r));
    store->wait(keys, std::chrono::hours(1));
    for (const std::string& s : store->multi_get(keys)) {
      if (s != shape(op, n)) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    ccrun::progress::step();
    if (rank == 0 && k % 10 == 0) std::printf("step %d\n", k), std::fflush(stdout);
  }
  if (rank == 0) std::printf("done\n");
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // the store gone, a bad address: said, not a crash
    std::fprintf(stderr, "collectives_queued_worker: %s\n", e.what());
    return 1;
  }
}
