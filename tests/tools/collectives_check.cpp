// collectives_check: a worker program that bootstraps a process group (env://
// by default, as under ccrun or torchrun), runs every operation on several
// data types and reduce ops and checks each result against a reference
// computed here: every operation, every data type, every reduce op, counts
// 0, 1, 7 and 1M+1. Exit 0: all correct; 1: a wrong result; 2: an operation
// failed (the ccrun::Error is printed on stderr). `--die-after-barrier R`
// makes rank R exit(3) after the first barrier, so that tests can see the
// other ranks fail with an error instead of hanging; `--stall-after-barrier R`
// makes rank R sleep past the timeout there instead, so that the others
// time out. `--backend mpi` runs the same checks on the MPI group, under
// mpiexec.
#include <CLI/CLI.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <thread>
#include <unistd.h>

#include "ccrun/collectives.h"

using namespace ccrun;

namespace {

int g_wrong = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++g_wrong;
    std::cerr << "collectives_check: WRONG: " << what << std::endl;
  }
}

// Rank r's value at index i: small integers, exact in every data type.
double value(int r, size_t i) { return double((r % 3) + 1 + int(i % 2)); }

// 16-bit float codecs for the values used here (exact for small integers;
// readback of rounded averages goes through the exact widening direction).
uint16_t to_bf16(double x) { return uint16_t(std::bit_cast<uint32_t>(float(x)) >> 16); }
double from_bf16(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }
uint16_t to_half(double x) {  // x a positive integer below 2048, or 0
  if (x == 0) return 0;
  int e = int(std::floor(std::log2(x)));
  return uint16_t(((e + 15) << 10) | int((x / std::ldexp(1.0, e) - 1) * 1024));
}
double from_half(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e ? std::ldexp(1.0 + m / 1024.0, e - 15) : std::ldexp(m / 1024.0, -14);
  return (h & 0x8000) ? -v : v;
}

double reduce_ref(ReduceOp op, int size, size_t i, bool integral) {
  double acc = value(0, i);
  for (int r = 1; r < size; ++r) {
    double x = value(r, i);
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += x;
    if (op == ReduceOp::kProd) acc *= x;
    if (op == ReduceOp::kMin) acc = std::min(acc, x);
    if (op == ReduceOp::kMax) acc = std::max(acc, x);
  }
  if (op == ReduceOp::kAvg) acc = integral ? std::trunc(acc / size) : acc / size;
  return acc;
}

bool close(double got, double want) { return std::abs(got - want) <= 0.01 * std::abs(want) + 1e-9; }

// A data type as this check reads and writes it: through double.
struct Type {
  DataType dt;
  const char* name;
  size_t width;
  bool integral;
  void (*put)(void*, size_t, double);
  double (*get)(const void*, size_t);
};
template <typename T>
void put_as(void* p, size_t i, double x) { static_cast<T*>(p)[i] = T(x); }
template <typename T>
double get_as(const void* p, size_t i) { return double(static_cast<const T*>(p)[i]); }
void put_half(void* p, size_t i, double x) { static_cast<uint16_t*>(p)[i] = to_half(x); }
double get_half(const void* p, size_t i) { return from_half(static_cast<const uint16_t*>(p)[i]); }
void put_bf16(void* p, size_t i, double x) { static_cast<uint16_t*>(p)[i] = to_bf16(x); }
double get_bf16(const void* p, size_t i) { return from_bf16(static_cast<const uint16_t*>(p)[i]); }

const Type kTypes[] = {
    {DataType::kInt8, "int8", 1, true, put_as<int8_t>, get_as<int8_t>},
    {DataType::kUInt8, "uint8", 1, true, put_as<uint8_t>, get_as<uint8_t>},
    {DataType::kInt32, "int32", 4, true, put_as<int32_t>, get_as<int32_t>},
    {DataType::kInt64, "int64", 8, true, put_as<int64_t>, get_as<int64_t>},
    {DataType::kFloat16, "float16", 2, false, put_half, get_half},
    {DataType::kBFloat16, "bfloat16", 2, false, put_bf16, get_bf16},
    {DataType::kFloat32, "float32", 4, false, put_as<float>, get_as<float>},
    {DataType::kFloat64, "float64", 8, false, put_as<double>, get_as<double>},
};

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "?";
}

// n elements of one type, filled by f(i).
struct Data {
  Data(const Type& t, size_t n) : t(t), n(n), bytes(std::max<size_t>(n, 1) * t.width) {}
  template <typename F>
  Data& fill(F f) {
    for (size_t i = 0; i < n; ++i) t.put(bytes.data(), i, f(i));
    return *this;
  }
  Buffer buf() { return {bytes.data(), n, t.dt}; }
  // Compares with want(i); reports the first difference.
  template <typename F>
  void expect_eq(F want, const std::string& what) const {
    for (size_t i = 0; i < n; ++i) {
      double got = t.get(bytes.data(), i), w = want(i);
      if (!close(got, w)) {
        expect(false, what + " [" + std::to_string(i) + "]: got " + std::to_string(got) +
                          ", want " + std::to_string(w));
        return;
      }
    }
  }
  const Type& t;
  size_t n;
  std::vector<char> bytes;
};

// What rank r moves at index i (exact in every type, different per rank).
double moved(int r, size_t i) { return double((size_t(r) * 7 + i) % 50 + 1); }

// all_reduce, reduce and reduce_scatter of n elements (per rank) with `op`.
void check_reductions(ProcessGroup& pg, const Type& t, ReduceOp op, size_t n) {
  const int r = pg.rank(), p = pg.size();
  const std::string what = std::string(t.name) + " " + op_name(op) + " count " + std::to_string(n);
  auto mine = [&](size_t i) { return value(r, i); };
  auto ref = [&](size_t i) { return reduce_ref(op, p, i, t.integral); };

  Data a(t, n);
  a.fill(mine);
  pg.all_reduce(a.buf(), op)->wait();
  a.expect_eq(ref, "all_reduce " + what);

  const int root = p - 1;
  Data b(t, n);
  b.fill(mine);
  pg.reduce(b.buf(), root, op)->wait();
  if (r == root) {
    b.expect_eq(ref, "reduce to " + std::to_string(root) + " " + what);
  } else {
    b.expect_eq(mine, "reduce (non-root keeps its buffer) " + what);
  }

  Data in(t, n * p), out(t, n);
  in.fill(mine);
  pg.reduce_scatter(in.buf(), out.buf(), op)->wait();
  out.expect_eq([&](size_t i) { return ref(r * n + i); }, "reduce_scatter " + what);
  in.expect_eq(mine, "reduce_scatter (input unchanged) " + what);
}

// The operations that move data without reducing it, n elements per rank.
void check_movement(ProcessGroup& pg, const Type& t, size_t n) {
  const int r = pg.rank(), p = pg.size();
  const std::string what = std::string(t.name) + " count " + std::to_string(n);
  auto mine = [&](size_t i) { return moved(r, i); };

  const int broot = p - 1;
  Data b(t, n);
  b.fill(mine);
  pg.broadcast(b.buf(), broot)->wait();
  b.expect_eq([&](size_t i) { return moved(broot, i); }, "broadcast from " + std::to_string(broot) + " " + what);

  Data send(t, n), all(t, n * p);
  send.fill(mine);
  pg.all_gather(send.buf(), all.buf())->wait();
  auto gathered = [&](size_t i) { return moved(int(i / n), i % n); };
  all.expect_eq(gathered, "all_gather " + what);

  const int groot = 1 % p;
  Data g(t, r == groot ? n * p : 0);
  pg.gather(send.buf(), g.buf(), groot)->wait();
  g.expect_eq(gathered, "gather to " + std::to_string(groot) + " " + what);

  Data parts(t, r == 0 ? n * p : 0), got(t, n);
  parts.fill([&](size_t i) { return moved(0, i); });
  pg.scatter(parts.buf(), got.buf(), 0)->wait();
  got.expect_eq([&](size_t i) { return moved(0, r * n + i); }, "scatter from 0 " + what);

  // all_to_all, equal: block j of rank q goes to rank j.
  Data ain(t, n * p), aout(t, n * p);
  ain.fill(mine);
  pg.all_to_all(ain.buf(), aout.buf())->wait();
  aout.expect_eq([&](size_t i) { return moved(int(i / n), r * n + i % n); }, "all_to_all (equal) " + what);

  // all_to_all, uneven: rank q sends ((q + j) % 3) * n elements to rank j,
  // element k of them moved(q, 1000 * j + k); some counts are 0.
  std::vector<size_t> sc(p), rc(p);
  size_t st = 0, rt = 0;
  for (int j = 0; j < p; ++j) {
    sc[j] = size_t((r + j) % 3) * n;
    rc[j] = size_t((j + r) % 3) * n;
    st += sc[j];
    rt += rc[j];
  }
  Data uin(t, st), uout(t, rt);
  std::vector<double> uwant;
  for (int j = 0; j < p; ++j) {
    for (size_t k = 0; k < rc[j]; ++k) uwant.push_back(moved(j, 1000 * size_t(r) + k));
  }
  size_t at = 0;
  for (int j = 0; j < p; ++j) {
    for (size_t k = 0; k < sc[j]; ++k) t.put(uin.bytes.data(), at++, moved(r, 1000 * size_t(j) + k));
  }
  pg.all_to_all(uin.buf(), sc, uout.buf(), rc)->wait();
  uout.expect_eq([&](size_t i) { return uwant[i]; }, "all_to_all (uneven) " + what);

  // send/recv around a ring.
  if (p > 1) {
    Data out(t, n), in(t, n);
    out.fill(mine);
    auto s = pg.send(out.buf(), (r + 1) % p, 7);
    auto q = pg.recv(in.buf(), (r + p - 1) % p, 7);
    s->wait();
    q->wait();
    in.expect_eq([&](size_t i) { return moved((r + p - 1) % p, i); }, "send/recv ring " + what);
  }
}

void check_all(ProcessGroup& pg) {
  const int p = pg.size();
  for (const Type& t : kTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
      // Products of up to 8 values of at most 4 overflow 8 bits: check
      // those on groups where they fit.
      if (op == ReduceOp::kProd && t.width == 1 && p > 4) continue;
      for (size_t n : {size_t(0), size_t(1), size_t(7)}) check_reductions(pg, t, op, n);
    }
    for (size_t n : {size_t(0), size_t(1), size_t(7)}) check_movement(pg, t, n);
  }
  // Large counts: 1M+1 elements through every operation.
  const size_t big = 1'000'001;
  check_reductions(pg, kTypes[6], ReduceOp::kSum, big);  // float32
  check_reductions(pg, kTypes[2], ReduceOp::kMax, big);  // int32
  check_movement(pg, kTypes[1], big);                   // uint8
  check_movement(pg, kTypes[6], big);                   // float32

  // A subgroup of the even ranks.
  const int r = pg.rank();
  std::vector<int> evens;
  for (int i = 0; i < p; i += 2) evens.push_back(i);
  auto sub = pg.new_group(evens);
  expect((sub != nullptr) == (r % 2 == 0), "new_group membership");
  if (sub) {
    std::vector<int64_t> s(1, 1);
    sub->all_reduce({s.data(), 1, DataType::kInt64})->wait();
    expect(s[0] == int64_t(evens.size()), "subgroup all_reduce");
  }
  pg.barrier()->wait();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"collectives_check: run and verify every collective"};
  InitOptions o;
  int timeout_s = 60;
  int die_rank = -1, stall_rank = -1;
  std::string backend = "gloo";
  app.add_option("--backend", backend, "gloo (the default), mpi (under mpiexec), auto or nccl");
  app.add_option("--init-method", o.init_method, "env://, tcp://host:port or file:///path");
  app.add_option("--rank", o.rank, "this rank (default: $RANK)");
  app.add_option("--world-size", o.world_size, "ranks (default: $WORLD_SIZE)");
  app.add_option("--timeout", timeout_s, "seconds an operation may take");
  app.add_option("--die-after-barrier", die_rank, "this rank exits(3) after the first barrier");
  app.add_option("--stall-after-barrier", stall_rank,
                 "this rank sleeps twice the timeout after the first barrier, then exits(3)");
  CLI11_PARSE(app, argc, argv);
  o.timeout = std::chrono::seconds(timeout_s);
  try {
    o.backend = parse_collectives_backend(backend);
    auto pg = init_process_group(o);
    pg->barrier()->wait();
    if (pg->rank() == die_rank) {
      std::cerr << "collectives_check: rank " << die_rank << " exits on purpose" << std::endl;
      _exit(3);
    }
    if (pg->rank() == stall_rank) {
      std::cerr << "collectives_check: rank " << stall_rank << " stalls on purpose" << std::endl;
      std::this_thread::sleep_for(2 * o.timeout);
      _exit(3);
    }
    check_all(*pg);
    pg->barrier()->wait();
    // One write: mpiexec merges the ranks' output, a line in pieces interleaves.
    std::string line = "collectives_check: rank " + std::to_string(pg->rank()) + " of " +
                       std::to_string(pg->size()) + ": " +
                       (g_wrong ? "FAILED" : "all operations correct") + "\n";
    std::cout << line << std::flush;
  } catch (const Error& e) {
    std::cerr << "collectives_check: error: " << e.what() << std::endl;
    return 2;
  }
  return g_wrong ? 1 : 0;
}
