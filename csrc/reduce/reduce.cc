#include "reduce/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "reduce/clones.h"
#include "trace/hooks.h"

namespace pycollect {

namespace {
bool isBitwise(ReduceOp op) { return op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor; }
}  // namespace

void checkReduction(ReduceOp op, DType dtype) {
  if (op == ReduceOp::kAvg && !isFloating(dtype)) {
    throw InvalidArgument(std::string("ReduceOp.AVG is not supported for integer dtype ") +
                          dtypeName(dtype) + " (as in NCCL); use SUM and divide");
  }
  if (isBitwise(op) && isFloating(dtype)) {
    throw InvalidArgument(std::string("ReduceOp.") + reduceOpName(op) + " is not supported for floating dtype " +
                          dtypeName(dtype) + " (bitwise ops take integer and bool dtypes, as in Gloo)");
  }
}

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;  // inf / nan
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan (keep nan quiet)
    return static_cast<uint16_t>(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 | ((absx >> 13) & 0x3ff) : 0));
  }
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to inf
  if (absx < 0x38800000u) {  // result is subnormal or zero
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest
    uint32_t mant = (absx & 0x7fffff) | 0x800000;
    int shift = 113 - static_cast<int>(absx >> 23) + 13;  // 126-14 = 112 .. position
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((absx >> 23) - 112) << 10 | ((absx >> 13) & 0x3ff);
  uint32_t rem = absx & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // may carry into exponent: right
  return static_cast<uint16_t>(sign | half);
}

float bfloat16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet nan
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

namespace {

struct Sum {
  template <typename T>
  static T apply(T a, T b) { return a + b; }
  static bool apply(bool a, bool b) { return a || b; }  // as Gloo's bool sum
};
struct Prod {
  template <typename T>
  static T apply(T a, T b) { return a * b; }
  static bool apply(bool a, bool b) { return a && b; }
};
struct Min {
  template <typename T>
  static T apply(T a, T b) { return b < a ? b : a; }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) { return a < b ? b : a; }
};
// Bitwise: integer and bool dtypes only (dispatchIntegral).
struct Band {
  template <typename T>
  static T apply(T a, T b) { return a & b; }
};
struct Bor {
  template <typename T>
  static T apply(T a, T b) { return a | b; }
};
struct Bxor {
  template <typename T>
  static T apply(T a, T b) { return a ^ b; }
};

template <typename T, typename Op>
PYCOLLECT_CLONES void loop(T* out, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(Op::apply(a[i], b[i]));
}

// 16-bit floats: widen, combine, round back.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float), typename Op>
void loop16(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Narrow(Op::apply(Widen(a[i]), Widen(b[i])));
}

// The integer and bool dtypes: every op's, and all the bitwise ops take (checkReduction
// refused floating dtypes for those before the call was queued).
template <typename Op>
void dispatchIntegral(void* out, const void* a, const void* b, size_t n, DType t) {
  switch (t) {
    case DType::kInt8: return loop<int8_t, Op>((int8_t*)out, (const int8_t*)a, (const int8_t*)b, n);
    case DType::kUInt8: return loop<uint8_t, Op>((uint8_t*)out, (const uint8_t*)a, (const uint8_t*)b, n);
    case DType::kInt32: return loop<int32_t, Op>((int32_t*)out, (const int32_t*)a, (const int32_t*)b, n);
    case DType::kInt64: return loop<int64_t, Op>((int64_t*)out, (const int64_t*)a, (const int64_t*)b, n);
    case DType::kInt16: return loop<int16_t, Op>((int16_t*)out, (const int16_t*)a, (const int16_t*)b, n);
    case DType::kBool: return loop<bool, Op>((bool*)out, (const bool*)a, (const bool*)b, n);
    default: throw Error(std::string("internal error: an integer reduction of floating dtype ") + dtypeName(t));
  }
}

// Every dtype: the arithmetic ops.
template <typename Op>
void dispatchType(void* out, const void* a, const void* b, size_t n, DType t) {
  switch (t) {
    case DType::kFloat32: return loop<float, Op>((float*)out, (const float*)a, (const float*)b, n);
    case DType::kFloat64: return loop<double, Op>((double*)out, (const double*)a, (const double*)b, n);
    case DType::kFloat16:
      return loop16<halfToFloat, floatToHalf, Op>((uint16_t*)out, (const uint16_t*)a, (const uint16_t*)b, n);
    case DType::kBFloat16:
      return loop16<bfloat16ToFloat, floatToBFloat16, Op>((uint16_t*)out, (const uint16_t*)a, (const uint16_t*)b, n);
    default: return dispatchIntegral<Op>(out, a, b, n, t);
  }
}

template <typename T>
PYCOLLECT_CLONES void divideLoop(T* p, size_t n, T d) {
  for (size_t i = 0; i < n; ++i) p[i] = p[i] / d;
}

}  // namespace

void reduce(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op) {
  trace::ReduceSpan span(count * dtypeSize(dtype));  // start and end events, when traced
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return dispatchType<Sum>(out, a, b, count, dtype);
    case ReduceOp::kProd: return dispatchType<Prod>(out, a, b, count, dtype);
    case ReduceOp::kMin: return dispatchType<Min>(out, a, b, count, dtype);
    case ReduceOp::kMax: return dispatchType<Max>(out, a, b, count, dtype);
    case ReduceOp::kBand: return dispatchIntegral<Band>(out, a, b, count, dtype);
    case ReduceOp::kBor: return dispatchIntegral<Bor>(out, a, b, count, dtype);
    case ReduceOp::kBxor: return dispatchIntegral<Bxor>(out, a, b, count, dtype);
  }
}

void divide(void* data, size_t count, DType dtype, int divisor) {
  switch (dtype) {
    case DType::kFloat32: return divideLoop<float>((float*)data, count, (float)divisor);
    case DType::kFloat64: return divideLoop<double>((double*)data, count, (double)divisor);
    case DType::kFloat16: {
      auto* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] = floatToHalf(halfToFloat(p[i]) / divisor);
      return;
    }
    case DType::kBFloat16: {
      auto* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] = floatToBFloat16(bfloat16ToFloat(p[i]) / divisor);
      return;
    }
    default:  // unreachable: checkReduction refuses AVG on integers
      throw Error(std::string("internal error: divide() on integer dtype ") + dtypeName(dtype));
  }
}

}  // namespace pycollect
