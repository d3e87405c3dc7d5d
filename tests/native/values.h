// The values the native driver's parts check against (engine_driver.cc runs the parts):
// each rank's element i of every buffer, the reduction of those over the ranks, and the
// element of each point-to-point message, so that a call's result is compared with a value
// computed here and a block that landed in the wrong place shows. EXPECT_EACH checks a
// whole buffer as one check and names the first element that differs.
#pragma once

#include <algorithm>
#include <type_traits>

#include "harness.h"

namespace driver {

template <typename T>
DType dtypeOf();
template <>
inline DType dtypeOf<float>() { return DType::kFloat32; }
template <>
inline DType dtypeOf<int64_t>() { return DType::kInt64; }

// Rank `rank`'s element i. Float32 values are small integers, so that every partial sum
// (whatever order an algorithm adds in) is exact; they vary with i so that a block that
// landed in the wrong place shows.
template <typename T>
T value(int rank, size_t i);
template <>
inline float value<float>(int rank, size_t i) { return static_cast<float>(rank + 1) + static_cast<float>(i % 65521); }
template <>
inline int64_t value<int64_t>(int rank, size_t i) { return int64_t{rank + 1} * 1000003 + static_cast<int64_t>(i); }

// The reduction over ranks 0..n-1 of element i (kAvg: the sum; the caller divides).
template <typename T>
T reduced(ReduceOp op, int n, size_t i) {
  T acc = value<T>(0, i);
  for (int r = 1; r < n; ++r) {
    const T v = value<T>(r, i);
    switch (op) {
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kBand:
      case ReduceOp::kBor:
      case ReduceOp::kBxor:
        if constexpr (std::is_integral_v<T>) {
          acc = op == ReduceOp::kBand ? (acc & v) : op == ReduceOp::kBor ? (acc | v) : (acc ^ v);
        }
        break;
      default: acc += v; break;
    }
  }
  return acc;
}

constexpr size_t kNone = static_cast<size_t>(-1);

// The first i where data[i] != want(i), or kNone.
template <typename T, typename Want>
size_t firstMismatch(const T* data, size_t count, Want want) {
  for (size_t i = 0; i < count; ++i) {
    if (!(data[i] == want(i))) return i;
  }
  return kNone;
}

#define EXPECT_EACH(data, count, want, what)                                                        \
  do {                                                                                              \
    const size_t bad_ = firstMismatch((data), (count), (want));                                     \
    EXPECT(bad_ == kNone, what << ": element " << bad_ << " of " << (count) << " is " << (data)[bad_] \
                                << ", expected " << (want)(bad_));                                  \
  } while (0)

// A point-to-point message's element: who sent it to whom, its number, its index.
inline int64_t payload(int from, int to, int k, size_t i) {
  return (int64_t{from * 16 + to} << 40) | (int64_t{k} << 20) | static_cast<int64_t>(i & 0xFFFFF);
}

// Message k's length from `from` to `to` in a storm: mostly small (some empty), now and
// then 1 MiB, which no socket buffer holds at once.
inline size_t stormLength(int k, int from, int to) {
  if (k % 40 == 39) return size_t{1} << 17;
  return static_cast<size_t>((k * 37 + from * 11 + to * 5) % 300);
}

}  // namespace driver
