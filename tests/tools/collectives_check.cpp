// collectives_check: a worker that bootstraps the default process group
// (env://, or the init method given as argv[1]) and checks every operation
// against results computed here. Exit 0 when all agree; prints what differs.
//
//   ccrun --nproc-per-node 4 --no-python build/tests/collectives_check
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "ccrun/collectives.h"

using namespace ccrun;

namespace {
int failures = 0;
void expect(bool ok, const char* what, int rank) {
  if (!ok) {
    std::fprintf(stderr, "collectives_check rank %d: %s is wrong\n", rank, what);
    ++failures;
  }
}
}  // namespace

int main(int argc, char** argv) {
  InitOptions opts;
  if (argc > 1) opts.init_method = argv[1];
  opts.timeout = std::chrono::seconds(60);
  try {
    auto pg = init_process_group(opts);
    int r = pg->rank(), n = pg->size();

    std::vector<double> v(1000);
    std::iota(v.begin(), v.end(), double(r));
    pg->all_reduce({v.data(), v.size(), DataType::Float64})->wait();
    bool ok = true;
    for (size_t i = 0; i < v.size(); ++i) ok = ok && v[i] == n * double(i) + n * (n - 1) / 2.0;
    expect(ok, "all_reduce", r);

    std::vector<int32_t> b(8, r == 0 ? 7 : -1);
    pg->broadcast({b.data(), b.size(), DataType::Int32}, 0)->wait();
    expect(b == std::vector<int32_t>(8, 7), "broadcast", r);

    std::vector<float> mine(3, float(r)), all(3 * n);
    pg->all_gather({mine.data(), 3, DataType::Float32}, {all.data(), all.size(), DataType::Float32})->wait();
    ok = true;
    for (int i = 0; i < n; ++i) ok = ok && all[3 * i] == float(i);
    expect(ok, "all_gather", r);

    std::vector<int64_t> send(2 * n), recv(2);
    for (int i = 0; i < 2 * n; ++i) send[i] = i;
    pg->reduce_scatter({send.data(), send.size(), DataType::Int64}, {recv.data(), 2, DataType::Int64})->wait();
    expect(recv[0] == int64_t(2 * r) * n && recv[1] == int64_t(2 * r + 1) * n, "reduce_scatter", r);

    std::vector<int32_t> a2a(n, r), got(n, -1);
    pg->all_to_all({a2a.data(), size_t(n), DataType::Int32}, {got.data(), size_t(n), DataType::Int32})->wait();
    ok = true;
    for (int i = 0; i < n; ++i) ok = ok && got[i] == i;
    expect(ok, "all_to_all", r);

    pg->barrier()->wait();
    if (failures == 0) std::printf("collectives_check rank %d of %d: ok\n", r, n);
    return failures == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "collectives_check: %s\n", e.what());
    return 2;
  }
}
