// collectives_mpi_bench: all_reduce (float32, sum) timed four ways on the
// same ranks, under mpiexec: MPI_Allreduce called directly ("raw"),
// MPI_Iallreduce then MPI_Test until done ("raw_i", what the MPI group's
// engine calls: MPICH picks other algorithms for it), the MPI group
// (CollectivesBackend::kMpi) and the Gloo group (over a store on rank 0,
// 127.0.0.1:--port). Rank 0 prints one row per size: the mean time of
// one call, the MPI group's over raw MPI's, and the bus bandwidth
// (2 (n-1)/n x bytes per call, as nccl-tests reports it).
//
//   mpiexec -n 2 build/tests/collectives_mpi_bench [--sizes 8,65536,1048576,16777216]
//
// Raw MPI and the MPI group share the process, so MPI is initialised here,
// at MPI_THREAD_MULTIPLE (the group then uses it from its own thread);
// `--only raw` or `--only mpi` times one alone, MPI at the level it gets
// in a program of its own (raw: SERIALIZED here; mpi: the group's own).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "ccrun/collectives.h"

#ifdef CCRUN_HAVE_MPI
#include <mpi.h>

namespace {

using Clock = std::chrono::steady_clock;

// Calls per timing: enough for about 0.2 s of traffic, at least 20.
int iterations(size_t bytes) {
  return int(std::clamp<size_t>((256u << 20) / std::max<size_t>(bytes, 1), 20, 2000));
}

// The best of 3 means, in microseconds, of `iters` calls of `one`, ranks
// lined up by `line_up` before each.
template <typename F, typename B>
double time_us(int iters, F one, B line_up) {
  for (int i = 0; i < 5; ++i) one();
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    line_up();
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) one();
    best = std::min(best, std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters);
  }
  return best;
}

struct Row {
  size_t bytes;
  double raw = 0, raw_i = 0, mpi = 0, gloo = 0;
};

void print(const std::vector<Row>& rows, int n) {
  std::printf("all_reduce float32 sum, %d ranks (mean us per call; busbw GB/s)\n", n);
  std::printf("%10s %10s %10s %10s %10s %9s %9s %10s %10s\n", "bytes", "raw_mpi", "raw_i",
              "mpi_group", "gloo", "mpi/raw", "mpi/raw_i", "busbw_mpi", "busbw_raw");
  for (const Row& r : rows) {
    auto bw = [&](double us) { return us > 0 ? 2.0 * (n - 1) / n * double(r.bytes) / us / 1e3 : 0; };
    std::printf("%10zu %10.1f %10.1f %10.1f %10.1f %9.3f %9.3f %10.2f %10.2f\n", r.bytes, r.raw,
                r.raw_i, r.mpi, r.gloo, r.raw > 0 ? r.mpi / r.raw : 0,
                r.raw_i > 0 ? r.mpi / r.raw_i : 0, bw(r.mpi), bw(r.raw));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"collectives_mpi_bench: all_reduce, raw MPI vs the MPI group vs the Gloo group"};
  std::vector<size_t> sizes{8, 64 << 10, 1 << 20, 16 << 20};
  std::string only;
  int port = 29517;
  app.add_option("--sizes", sizes, "message sizes in bytes")->delimiter(',');
  app.add_option("--only", only, "raw or mpi: time that one alone");
  app.add_option("--port", port, "the Gloo group's store port on 127.0.0.1");
  CLI11_PARSE(app, argc, argv);
  const bool raw = only.empty() || only == "raw", mpi = only.empty() || only == "mpi";
  const bool gloo = only.empty();
  int provided = 0, rank = 0, n = 1;
  if (raw) MPI_Init_thread(&argc, &argv, mpi ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED, &provided);
  ccrun::InitOptions o;
  std::shared_ptr<ccrun::ProcessGroup> mpg, gpg;
  try {
    if (mpi) {
      o.backend = ccrun::CollectivesBackend::kMpi;
      mpg = ccrun::init_process_group(o);
      rank = mpg->rank();
      n = mpg->size();
    } else {
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &n);
    }
    if (gloo) {
      o.backend = ccrun::CollectivesBackend::kGloo;
      o.init_method = "tcp://127.0.0.1:" + std::to_string(port);
      o.rank = rank;
      o.world_size = n;
      gpg = ccrun::init_process_group(o);
    }
  } catch (const ccrun::Error& e) {
    std::fprintf(stderr, "collectives_mpi_bench: %s\n", e.what());
    return 2;
  }
  auto line_up = [&] {
    if (mpg) mpg->barrier()->wait();
    else MPI_Barrier(MPI_COMM_WORLD);
  };
  std::vector<Row> rows;
  for (size_t bytes : sizes) {
    std::vector<float> buf(std::max<size_t>(bytes / 4, 1), 1.0f);
    ccrun::Buffer b{buf.data(), buf.size(), ccrun::DataType::kFloat32};
    Row row{bytes};
    const int iters = iterations(bytes);
    if (raw) {
      row.raw = time_us(iters, [&] {
        MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }, line_up);
      row.raw_i = time_us(iters, [&] {
        MPI_Request req;
        MPI_Iallreduce(MPI_IN_PLACE, buf.data(), int(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                       &req);
        for (int done = 0; !done;) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      }, line_up);
    }
    if (mpg) row.mpi = time_us(iters, [&] { mpg->all_reduce(b)->wait(); }, line_up);
    if (gpg) row.gloo = time_us(iters, [&] { gpg->all_reduce(b)->wait(); }, line_up);
    rows.push_back(row);
  }
  if (rank == 0) print(rows, n);
  gpg.reset();
  mpg.reset();
  if (raw) MPI_Finalize();
  return 0;
}

#else

int main() {
  std::fprintf(stderr, "collectives_mpi_bench: this build has no MPI; rebuild with libmpich-dev\n");
  return 2;
}

#endif
