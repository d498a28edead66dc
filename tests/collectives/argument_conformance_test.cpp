// One set of bad-argument cases run against both backends: the Gloo group
// (host buffers, ranks as threads over a HashStore) and the NCCL group (over
// the fake CUDA and NCCL of fake_nccl.h). Each case must fail at once, on
// both, with the same words after the group's name: the rules of
// collectives/argument_rules.h, written once.
#include <catch2/catch.hpp>
#include <stdlib.h>

#include <array>
#include <functional>
#include <string>

#include "ccrun/collectives.h"
#include "ccrun/hash_store.h"
#include "collectives/fake_nccl.h"
#include "collectives/rank_threads.h"
#include "nccl_group.h"

using namespace ccrun;
using namespace ccrun::test;
using namespace std::chrono_literals;

namespace {

// A buffer of `n` elements where the backend under test wants it.
using Alloc = std::function<Buffer(size_t n, DataType t)>;

struct Case {
  const char* name;
  std::function<void(ProcessGroup&, const Alloc&)> call;
  const char* expect;  // what the error says after "<op> on <group>: "
};

Buffer f32(const Alloc& a, size_t n) { return a(n, DataType::kFloat32); }

// Every case runs on a group of 2 and fails on every rank before any rank
// communicates, so the ranks need not agree on anything.
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"broadcast root out of range", [](ProcessGroup& pg, const Alloc& a) { pg.broadcast(f32(a, 4), 2); },
       "root 2 is outside the group (size 2)"},
      {"reduce root negative", [](ProcessGroup& pg, const Alloc& a) { pg.reduce(f32(a, 4), -1); },
       "root -1 is outside the group (size 2)"},
      {"gather root out of range", [](ProcessGroup& pg, const Alloc& a) { pg.gather(f32(a, 4), f32(a, 8), 5); },
       "root 5 is outside the group (size 2)"},
      {"send dst out of range", [](ProcessGroup& pg, const Alloc& a) { pg.send(f32(a, 4), 2); },
       "dst 2 is outside the group (size 2)"},
      {"recv src negative", [](ProcessGroup& pg, const Alloc& a) { pg.recv(f32(a, 4), -1); },
       "src -1 is outside the group (size 2)"},
      {"send negative tag", [](ProcessGroup& pg, const Alloc& a) { pg.send(f32(a, 4), 1 - pg.rank(), -1); },
       "tag -1 is negative; give 0 or more"},
      {"null buffer", [](ProcessGroup& pg, const Alloc& a) {
         Buffer b = f32(a, 4);
         b.data = nullptr;
         pg.all_reduce(b);
       }, "null buffer of 4 elements"},
      {"all_gather recv too small", [](ProcessGroup& pg, const Alloc& a) { pg.all_gather(f32(a, 4), f32(a, 7)); },
       "recv holds 7 elements; it must hold 8"},
      {"all_gather data types differ",
       [](ProcessGroup& pg, const Alloc& a) { pg.all_gather(f32(a, 4), a(8, DataType::kInt32)); },
       "send and recv have different data types"},
      {"reduce_scatter send wrong size",
       [](ProcessGroup& pg, const Alloc& a) { pg.reduce_scatter(f32(a, 5), f32(a, 4)); },
       "send holds 5 elements; it must hold 8"},
      {"all_to_all recv larger than send", [](ProcessGroup& pg, const Alloc& a) { pg.all_to_all(f32(a, 4), f32(a, 6)); },
       "send.count (4) and recv.count (6) must be equal and a multiple of the group size 2; use the all_to_all with counts for uneven splits"},
      {"all_to_all count not a multiple", [](ProcessGroup& pg, const Alloc& a) { pg.all_to_all(f32(a, 3), f32(a, 3)); },
       "send.count (3) and recv.count (3) must be equal and a multiple of the group size 2; use the all_to_all with counts for uneven splits"},
      {"all_to_all counts: one per rank",
       [](ProcessGroup& pg, const Alloc& a) { pg.all_to_all(f32(a, 4), {4}, f32(a, 4), {2, 2}); },
       "give one count per rank (2); got 1 send and 2 recv counts"},
      {"all_to_all counts: buffer larger than the counts",
       [](ProcessGroup& pg, const Alloc& a) { pg.all_to_all(f32(a, 4), {1, 1}, f32(a, 2), {1, 1}); },
       "send holds 4 elements; it must hold 2"},
      {"new_group rank listed twice", [](ProcessGroup& pg, const Alloc&) { (void)pg.new_group({0, 0}); },
       "rank 0 is listed twice"},
      {"new_group rank out of range", [](ProcessGroup& pg, const Alloc&) { (void)pg.new_group({1, 2}); },
       "rank 2 is not in this group of 2"},
  };
  return all;
}

// The error each case raises on one group, less the "<op> on <group>: " part.
std::vector<std::string> errors_of(ProcessGroup& pg, const Alloc& alloc) {
  std::vector<std::string> out;
  for (const Case& c : cases()) {
    std::string what = "(no error)";
    try {
      c.call(pg, alloc);
    } catch (const Error& e) {
      what = e.what();
      size_t colon = what.find(": ");
      what = colon == std::string::npos ? what : what.substr(colon + 2);
    }
    out.push_back(what);
  }
  return out;
}

// Runs the cases on both ranks of a 2-rank group made by `make`; rank 0's errors.
std::vector<std::string> run_group(const std::function<std::shared_ptr<ProcessGroup>(int)>& make,
                                   const std::function<Alloc(int)>& alloc_for) {
  std::array<std::vector<std::string>, 2> got;
  test::on_rank_threads(2, [&](int r) {
    auto pg = make(r);
    got[size_t(r)] = errors_of(*pg, alloc_for(r));
    pg->barrier()->wait();  // both done before either group goes away
  });
  CHECK(got[0] == got[1]);
  return got[0];
}

}  // namespace

TEST_CASE("argument rules: Gloo and NCCL refuse the same calls with the same words",
          "[collectives][conformance]") {
  unsetenv("LOCAL_RANK");  // the fake GPUs follow the ranks
  std::array<std::vector<std::vector<char>>, 2> host_memory;  // per rank, freed at the end
  auto gloo_store = std::make_shared<store::HashStore>();
  auto gloo = run_group(
      [&](int r) { return create_gloo_group(gloo_store, r, 2, 20s); },
      [&](int r) -> Alloc {
        auto* mine = &host_memory[size_t(r)];
        return [mine](size_t n, DataType t) {
          mine->emplace_back(n * element_size(t) + 1);
          return Buffer{mine->back().data(), n, t, DeviceType::kHost};
        };
      });

  auto cuda = std::make_shared<FakeCuda>(2);
  auto nccl_store = std::make_shared<store::HashStore>();
  auto nccl = run_group(
      [&](int r) { return collectives::create_nccl_group(nccl_store, r, 2, 20s, cuda->devices_for_rank()); },
      [&](int r) -> Alloc {
        return [cuda, r](size_t n, DataType t) {
          return Buffer{cuda->alloc_bytes(n * element_size(t) + 1, r), n, t, DeviceType::kCuda};
        };
      });

  REQUIRE(gloo.size() == cases().size());
  REQUIRE(nccl.size() == cases().size());
  for (size_t i = 0; i < cases().size(); ++i) {
    INFO("case: " << cases()[i].name);
    CHECK(gloo[i] == cases()[i].expect);
    CHECK(nccl[i] == cases()[i].expect);
  }
}
