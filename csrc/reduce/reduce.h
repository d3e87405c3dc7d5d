// Typed reduction kernels: out[i] = a[i] op b[i] for every (dtype, op) pair the ops
// define (the bitwise ones: integer and bool dtypes).
// float16 and bfloat16 are widened to float, combined, and rounded back to
// nearest-even, one pair at a time (as Gloo and NCCL do for these types).
#pragma once

#include <cstddef>

#include "common/types.h"

namespace pycollect {

// Throws InvalidArgument if the kernels do not define `op` for `dtype`: AVG on an
// integer dtype (as in NCCL), the bitwise BAND, BOR and BXOR on a floating one (as in
// Gloo). The communicator calls it once per call, before anything is queued.
void checkReduction(ReduceOp op, DType dtype);

// `out` may alias `a` (the in-place case); `b` must not overlap `out` otherwise.
// kAvg reduces like kSum: the division is a separate `divide` step by the caller.
void reduce(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op);

// data[i] /= divisor, for floating types (AVG's final step; checkReduction
// refused AVG on integers before the call was queued).
void divide(void* data, size_t count, DType dtype, int divisor);

// Conversions used by the kernels, exposed for tests.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t h);
uint16_t floatToBFloat16(float f);

}  // namespace pycollect
