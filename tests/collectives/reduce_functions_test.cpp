// The element-wise reductions of collectives/reduce_functions.cpp: every
// float16 and bfloat16 value survives a reduction with itself, and sums
// round to nearest even as the compiler's own _Float16 does. Elements are
// checked one by one, at counts that take the vectorized loop and its tail.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "reduce_functions.h"

using namespace ccrun;
using ccrun::collectives::reduce_function;

namespace {
bool is_nan_half(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
bool is_nan_bf16(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }
}  // namespace

TEST_CASE("reduce functions: every float16 and bfloat16 value reduces with itself to itself",
          "[collectives]") {
  std::vector<uint16_t> all(65536), out(65536, 0x5555);
  for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
      std::fill(out.begin(), out.end(), 0x5555);
      reduce_function(t, op)(out.data(), all.data(), all.data(), all.size());
      for (size_t i = 0; i < all.size(); ++i) {
        bool nan = t == DataType::kFloat16 ? is_nan_half(all[i]) : is_nan_bf16(all[i]);
        if (nan) {
          REQUIRE((t == DataType::kFloat16 ? is_nan_half(out[i]) : is_nan_bf16(out[i])));
        } else if (out[i] != all[i]) {
          FAIL("dtype " << int(t) << " value 0x" << std::hex << all[i] << " became 0x" << out[i]);
        }
      }
    }
  }
}

TEST_CASE("reduce functions: float16 sums and products round to nearest even, every element written",
          "[collectives]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> bits(0, 0xffff);
  for (size_t n : {size_t(1), size_t(3), size_t(7), size_t(17), size_t(4099)}) {
    std::vector<uint16_t> a(n), b(n), c(n, 0x0202);
    for (size_t i = 0; i < n; ++i) {
      do a[i] = uint16_t(bits(rng)); while (is_nan_half(a[i]));
      do b[i] = uint16_t(bits(rng)); while (is_nan_half(b[i]));
    }
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd}) {
      reduce_function(DataType::kFloat16, op)(c.data(), a.data(), b.data(), n);
      for (size_t i = 0; i < n; ++i) {
#ifdef __FLT16_MAX__
        // Reduced in float and rounded once back to half (docs/collectives.md):
        // the compiler's own float -> _Float16 conversion is the reference.
        float x = float(std::bit_cast<_Float16>(a[i])), y = float(std::bit_cast<_Float16>(b[i]));
        float r = op == ReduceOp::kSum ? x + y : x * y;
        uint16_t want = std::bit_cast<uint16_t>(static_cast<_Float16>(r));
        if (std::isnan(r)) {
          REQUIRE(is_nan_half(c[i]));
        } else if (c[i] != want) {
          FAIL("n " << n << " element " << i << ": 0x" << std::hex << a[i] << " op 0x" << b[i]
                    << " gave 0x" << c[i] << ", want 0x" << want);
        }
#else
        REQUIRE(c[i] != 0x0202);
#endif
      }
    }
  }
}
