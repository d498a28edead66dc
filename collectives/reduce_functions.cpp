// Element-wise reductions per data type (see reduce_functions.h).
#include "reduce_functions.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

namespace ccrun::collectives {
namespace {

// bfloat16 <-> float: the high half of a float32, rounded to nearest even.
float bf16_to_float(uint16_t v) {
  uint32_t bits = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return uint16_t(bits >> 16 | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

// IEEE half <-> float, exact both ways (round to nearest even into half,
// subnormals, infinities and NaN kept), by bit manipulation through
// std::bit_cast. gloo's cpu_half2float/cpu_float2half_rn pun through
// pointer casts; once -O3 vectorized the loops below, that undefined
// behaviour left elements unwritten (a float16 sum of 3 elements wrote 2).
float half_to_float(uint16_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t o = uint32_t(h & 0x7fffu) << 13;
  const uint32_t exp = shifted_exp & o;
  o += uint32_t(127 - 15) << 23;
  if (exp == shifted_exp) {
    o += uint32_t(128 - 16) << 23;  // infinity or NaN
  } else if (exp == 0) {            // zero or subnormal: renormalise in float
    o += 1u << 23;
    o = std::bit_cast<uint32_t>(std::bit_cast<float>(o) - std::bit_cast<float>(113u << 23));
  }
  return std::bit_cast<float>(o | uint32_t(h & 0x8000u) << 16);
}
uint16_t float_to_half(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint16_t o;
  if (x >= (127u + 16u) << 23) {           // beyond half's range: infinity (or NaN)
    o = x > (255u << 23) ? 0x7e00 : 0x7c00;
  } else if (x < 113u << 23) {             // a half subnormal or zero: let float rounding do it
    const uint32_t magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    o = uint16_t(std::bit_cast<uint32_t>(std::bit_cast<float>(x) + std::bit_cast<float>(magic)) - magic);
  } else {                                 // normal: round the mantissa to nearest even
    const uint32_t mant_odd = (x >> 13) & 1u;
    x += (uint32_t(15) << 23) - (uint32_t(127) << 23) + 0xfffu + mant_odd;
    o = uint16_t(x >> 13);
  }
  return uint16_t(o | sign >> 16);
}

// How a stored element reads and writes as its compute type.
template <typename T>
struct Num {
  using C = T;
  static C get(const void* p, size_t i) { return static_cast<const T*>(p)[i]; }
  static void put(void* p, size_t i, C v) { static_cast<T*>(p)[i] = v; }
};
struct Half {
  using C = float;
  static C get(const void* p, size_t i) { return half_to_float(static_cast<const uint16_t*>(p)[i]); }
  static void put(void* p, size_t i, C v) { static_cast<uint16_t*>(p)[i] = float_to_half(v); }
};
struct BHalf {
  using C = float;
  static C get(const void* p, size_t i) { return bf16_to_float(static_cast<const uint16_t*>(p)[i]); }
  static void put(void* p, size_t i, C v) { static_cast<uint16_t*>(p)[i] = float_to_bf16(v); }
};

template <typename E, typename Op>
void apply(void* c, const void* a, const void* b, size_t n) {
  // c may be a or b (gloo reduces in place), but element i only reads and
  // writes index i, so there is no dependence between iterations.
#pragma GCC ivdep
  for (size_t i = 0; i < n; ++i) E::put(c, i, Op{}(E::get(a, i), E::get(b, i)));
}

struct Sum { template <typename C> C operator()(C x, C y) const { return x + y; } };
struct Prod { template <typename C> C operator()(C x, C y) const { return x * y; } };
struct Min { template <typename C> C operator()(C x, C y) const { return std::min(x, y); } };
struct Max { template <typename C> C operator()(C x, C y) const { return std::max(x, y); } };

template <typename E>
ReduceFn for_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return &apply<E, Sum>;
    case ReduceOp::kProd: return &apply<E, Prod>;
    case ReduceOp::kMin: return &apply<E, Min>;
    case ReduceOp::kMax: return &apply<E, Max>;
  }
  return &apply<E, Sum>;
}

template <typename E>
void divide_as(void* data, size_t n, int d) {
  for (size_t i = 0; i < n; ++i) {
    E::put(data, i, static_cast<typename E::C>(E::get(data, i) / static_cast<typename E::C>(d)));
  }
}

}  // namespace

ReduceFn reduce_function(DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kInt8: return for_op<Num<int8_t>>(op);
    case DataType::kUInt8: return for_op<Num<uint8_t>>(op);
    case DataType::kInt32: return for_op<Num<int32_t>>(op);
    case DataType::kInt64: return for_op<Num<int64_t>>(op);
    case DataType::kFloat16: return for_op<Half>(op);
    case DataType::kBFloat16: return for_op<BHalf>(op);
    case DataType::kFloat32: return for_op<Num<float>>(op);
    case DataType::kFloat64: return for_op<Num<double>>(op);
  }
  return nullptr;
}

void divide(void* data, size_t n, DataType dtype, int d) {
  switch (dtype) {
    case DataType::kInt8: return divide_as<Num<int8_t>>(data, n, d);
    case DataType::kUInt8: return divide_as<Num<uint8_t>>(data, n, d);
    case DataType::kInt32: return divide_as<Num<int32_t>>(data, n, d);
    case DataType::kInt64: return divide_as<Num<int64_t>>(data, n, d);
    case DataType::kFloat16: return divide_as<Half>(data, n, d);
    case DataType::kBFloat16: return divide_as<BHalf>(data, n, d);
    case DataType::kFloat32: return divide_as<Num<float>>(data, n, d);
    case DataType::kFloat64: return divide_as<Num<double>>(data, n, d);
  }
}

}  // namespace ccrun::collectives

namespace ccrun {
size_t element_size(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUInt8: return 1;
    case DataType::kFloat16:
    case DataType::kBFloat16: return 2;
    case DataType::kInt32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kFloat64: return 8;
  }
  return 1;
}
}  // namespace ccrun
