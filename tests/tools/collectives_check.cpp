// collectives_check: a worker program that bootstraps a process group (env://
// by default, as under ccrun or torchrun), runs every operation on several
// data types and reduce ops and checks each result against a reference
// computed here. Exit 0: all correct; 1: a wrong result; 2: an operation
// failed (the ccrun::Error is printed on stderr). `--die-after-barrier R`
// makes rank R exit(3) after the first barrier, so that tests can see the
// other ranks fail with an error instead of hanging.
#include <CLI/CLI.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
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
    if (op == ReduceOp::Sum || op == ReduceOp::Avg) acc += x;
    if (op == ReduceOp::Prod) acc *= x;
    if (op == ReduceOp::Min) acc = std::min(acc, x);
    if (op == ReduceOp::Max) acc = std::max(acc, x);
  }
  if (op == ReduceOp::Avg) acc = integral ? std::trunc(acc / size) : acc / size;
  return acc;
}

bool close(double got, double want) { return std::abs(got - want) <= 0.01 * std::abs(want) + 1e-9; }

template <typename T>
void check_all_reduce(ProcessGroup& pg, DataType dt, ReduceOp op, size_t n, T (*load)(double),
                      double (*read)(T), bool integral) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = load(value(pg.rank(), i));
  pg.all_reduce({v.data(), n, dt}, op)->wait();
  for (size_t i = 0; i < n; ++i) {
    double want = reduce_ref(op, pg.size(), i, integral);
    if (!close(read(v[i]), want)) {
      expect(false, "all_reduce dtype " + std::to_string(int(dt)) + " op " +
                        std::to_string(int(op)) + " [" + std::to_string(i) + "]: got " +
                        std::to_string(read(v[i])) + ", want " + std::to_string(want));
      return;
    }
  }
}

template <typename T>
T load_as(double x) { return T(x); }
template <typename T>
double read_as(T x) { return double(x); }

void check_all_reduces(ProcessGroup& pg) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
    // Products of up to 8 values of at most 4 overflow 8 bits: check those on
    // groups where they fit.
    bool small = op != ReduceOp::Prod || pg.size() <= 4;
    if (small) check_all_reduce<int8_t>(pg, DataType::Int8, op, 5, load_as, read_as, true);
    if (small) check_all_reduce<uint8_t>(pg, DataType::UInt8, op, 5, load_as, read_as, true);
    check_all_reduce<int32_t>(pg, DataType::Int32, op, 7, load_as, read_as, true);
    check_all_reduce<int64_t>(pg, DataType::Int64, op, 3, load_as, read_as, true);
    check_all_reduce<float>(pg, DataType::Float32, op, 1001, load_as, read_as, false);
    check_all_reduce<double>(pg, DataType::Float64, op, 2, load_as, read_as, false);
    check_all_reduce<uint16_t>(pg, DataType::Float16, op, 9, to_half, from_half, false);
    check_all_reduce<uint16_t>(pg, DataType::BFloat16, op, 9, to_bf16, from_bf16, false);
  }
}

void check_others(ProcessGroup& pg) {
  const int r = pg.rank(), p = pg.size();
  const size_t k = 3;
  std::vector<double> v(k, r);
  // broadcast from the last rank.
  pg.broadcast({v.data(), k, DataType::Float64}, p - 1)->wait();
  expect(v == std::vector<double>(k, p - 1), "broadcast from " + std::to_string(p - 1));
  // reduce (Sum) to rank 0; other ranks keep their buffer.
  std::vector<int64_t> red(k, r + 1);
  pg.reduce({red.data(), k, DataType::Int64}, 0)->wait();
  expect(red == std::vector<int64_t>(k, r == 0 ? int64_t(p) * (p + 1) / 2 : r + 1), "reduce to 0");
  // all_gather / gather: rank i's k values land at i*k.
  std::vector<float> mine(k, float(r)), all(k * p, -1), want(k * p);
  for (int i = 0; i < p; ++i) std::fill_n(want.begin() + i * k, k, float(i));
  pg.all_gather({mine.data(), k, DataType::Float32}, {all.data(), all.size(), DataType::Float32})->wait();
  expect(all == want, "all_gather");
  const int groot = 1 % p;
  std::fill(all.begin(), all.end(), -1.0f);
  pg.gather({mine.data(), k, DataType::Float32}, {all.data(), all.size(), DataType::Float32}, groot)->wait();
  if (r == groot) expect(all == want, "gather to " + std::to_string(groot));
  // scatter from 0: rank i receives slice i.
  std::vector<float> got(k, -1);
  pg.scatter({want.data(), want.size(), DataType::Float32}, {got.data(), k, DataType::Float32}, 0)->wait();
  expect(got == std::vector<float>(k, float(r)), "scatter from 0");
  // reduce_scatter: every rank sends j+r at slot j; rank r gets sum_q (r+q).
  std::vector<int32_t> rs_in(k * p), rs_out(k, -1);
  for (int j = 0; j < p; ++j) std::fill_n(rs_in.begin() + j * k, k, j + r);
  pg.reduce_scatter({rs_in.data(), rs_in.size(), DataType::Int32}, {rs_out.data(), k, DataType::Int32})->wait();
  expect(rs_out == std::vector<int32_t>(k, r * p + p * (p - 1) / 2), "reduce_scatter");
  // all_to_all, equal: rank r sends 100*r+j to rank j.
  std::vector<int64_t> a_in(k * p), a_out(k * p, -1), a_want(k * p);
  for (int j = 0; j < p; ++j) {
    std::fill_n(a_in.begin() + j * k, k, 100 * r + j);
    std::fill_n(a_want.begin() + j * k, k, 100 * j + r);
  }
  pg.all_to_all({a_in.data(), a_in.size(), DataType::Int64}, {a_out.data(), a_out.size(), DataType::Int64})->wait();
  expect(a_out == a_want, "all_to_all (equal)");
  // all_to_all, uneven: rank r sends (r+j)%3 elements to j (some 0).
  std::vector<size_t> sc(p), rc(p);
  std::vector<int64_t> u_in, u_want;
  for (int j = 0; j < p; ++j) {
    sc[j] = size_t((r + j) % 3);
    rc[j] = size_t((j + r) % 3);
    u_in.insert(u_in.end(), sc[j], 100 * r + j);
    u_want.insert(u_want.end(), rc[j], 100 * j + r);
  }
  std::vector<int64_t> u_out(u_want.size(), -1);
  pg.all_to_all({u_in.data(), u_in.size(), DataType::Int64}, sc,
                {u_out.data(), u_out.size(), DataType::Int64}, rc)->wait();
  expect(u_out == u_want, "all_to_all (uneven)");
  // send/recv around a ring.
  if (p > 1) {
    std::vector<int32_t> out(k, r), in(k, -1);
    auto s = pg.send({out.data(), k, DataType::Int32}, (r + 1) % p, 7);
    auto q = pg.recv({in.data(), k, DataType::Int32}, (r + p - 1) % p, 7);
    s->wait();
    q->wait();
    expect(in == std::vector<int32_t>(k, (r + p - 1) % p), "send/recv ring");
  }
  // A subgroup of the even ranks.
  std::vector<int> evens;
  for (int i = 0; i < p; i += 2) evens.push_back(i);
  auto sub = pg.new_group(evens);
  expect((sub != nullptr) == (r % 2 == 0), "new_group membership");
  if (sub) {
    std::vector<int64_t> s(1, 1);
    sub->all_reduce({s.data(), 1, DataType::Int64})->wait();
    expect(s[0] == int64_t(evens.size()), "subgroup all_reduce");
  }
  pg.barrier()->wait();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"collectives_check: run and verify every collective"};
  InitOptions o;
  int timeout_s = 60;
  int die_rank = -1;
  app.add_option("--init-method", o.init_method, "env://, tcp://host:port or file:///path");
  app.add_option("--rank", o.rank, "this rank (default: $RANK)");
  app.add_option("--world-size", o.world_size, "ranks (default: $WORLD_SIZE)");
  app.add_option("--timeout", timeout_s, "seconds an operation may take");
  app.add_option("--die-after-barrier", die_rank, "this rank exits(3) after the first barrier");
  CLI11_PARSE(app, argc, argv);
  o.backend = "gloo";
  o.timeout = std::chrono::seconds(timeout_s);
  try {
    auto pg = init_process_group(o);
    pg->barrier()->wait();
    if (pg->rank() == die_rank) {
      std::cerr << "collectives_check: rank " << die_rank << " exits on purpose" << std::endl;
      _exit(3);
    }
    check_all_reduces(*pg);
    check_others(*pg);
    pg->barrier()->wait();
    std::cout << "collectives_check: rank " << pg->rank() << " of " << pg->size() << ": "
              << (g_wrong ? "FAILED" : "all operations correct") << std::endl;
  } catch (const Error& e) {
    std::cerr << "collectives_check: error: " << e.what() << std::endl;
    return 2;
  }
  return g_wrong ? 1 : 0;
}
