//===- reduce_functions.h - Element-wise reductions per data type -*- C++ -*-=//
//
// Gloo reduces with a plain function `c[i] = a[i] op b[i]`. These are ccrun's,
// one per (data type, op), with float16 and bfloat16 computed in float and
// rounded back (round to nearest even), so half types reduce correctly on
// the host.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>

#include "ccrun/collectives.h"

namespace ccrun::collectives {

using ReduceFn = void (*)(void* c, const void* a, const void* b, size_t n);

// The function for `op` on `dtype` (Avg reduces as Sum; divide afterwards).
ReduceFn reduce_function(DataType dtype, ReduceOp op);

// Divides n elements in place by `divisor` (for Avg).
void divide(void* data, size_t n, DataType dtype, int divisor);

}  // namespace ccrun::collectives
