#include "reduce/compress.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "reduce/clones.h"

namespace pycollect {

namespace {

size_t int8Blocks(size_t count) { return (count + kInt8Block - 1) / kInt8Block; }

PYCOLLECT_CLONES void bf16Encode(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t x;
    std::memcpy(&x, &in[i], 4);
    const bool nan = (x & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    out[i] = static_cast<uint16_t>(nan ? (x >> 16) | 0x40u : rounded);  // a NaN stays a (quiet) NaN
  }
}

PYCOLLECT_CLONES void bf16Decode(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t x = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(&out[i], &x, 4);
  }
}

PYCOLLECT_CLONES void bf16DecodeAdd(const uint16_t* in, size_t n, float* acc) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t x = static_cast<uint32_t>(in[i]) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    acc[i] += f;
  }
}

// One block of at most kInt8Block values: its scale, then its int8s.
PYCOLLECT_CLONES float int8EncodeBlock(const float* in, size_t n, int8_t* q) {
  float m = 0.0f, poison = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    m = std::max(m, std::fabs(in[i]));
    poison += in[i] * 0.0f;  // NaN iff some value is inf or NaN
  }
  if (poison != 0.0f || std::isnan(poison)) {
    std::memset(q, 0, n);
    return std::numeric_limits<float>::quiet_NaN();
  }
  // Near the subnormals 127 / m overflows: scale the block up by 2^64 first (exact).
  const float pre = m < 0x1p-64f ? 0x1p64f : 1.0f;
  const float inv = m > 0.0f ? 127.0f / (m * pre) : 0.0f;
  for (size_t i = 0; i < n; ++i) {
    float y = (in[i] * pre) * inv;
    y = std::min(127.0f, std::max(-127.0f, y));
    q[i] = static_cast<int8_t>(static_cast<int>(y + (y >= 0.0f ? 0.5f : -0.5f)));  // nearest, ties away
  }
  return m / 127.0f;
}

PYCOLLECT_CLONES void int8DecodeBlock(const int8_t* q, size_t n, float s, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(q[i]) * s;
}

PYCOLLECT_CLONES void int8DecodeAddBlock(const int8_t* q, size_t n, float s, float* acc) {
  for (size_t i = 0; i < n; ++i) acc[i] += static_cast<float>(q[i]) * s;
}

// The int8 run's parts: its scales first, its values behind them.
struct Int8Run {
  Int8Run(const void* wire, size_t count)
      : scales(static_cast<const char*>(wire)),
        values(reinterpret_cast<const int8_t*>(static_cast<const char*>(wire) + int8Blocks(count) * 4)) {}
  float scale(size_t b) const {
    float s;
    std::memcpy(&s, scales + b * 4, 4);  // the run may start anywhere: no aligned load
    return s;
  }
  const char* scales;
  const int8_t* values;
};

void refuseNone(Compress c) {
  if (c == Compress::kNone) throw InvalidArgument("compress: no wire format to encode (\"none\")");
}

// decode (Add false) or decodeAdd (Add true).
template <bool Add>
void decodeInto(Compress c, const void* wire, size_t count, float* out) {
  refuseNone(c);
  if (c == Compress::kBf16) {
    const auto* h = static_cast<const uint16_t*>(wire);
    return Add ? bf16DecodeAdd(h, count, out) : bf16Decode(h, count, out);
  }
  const Int8Run run(wire, count);
  for (size_t b = 0, at = 0; at < count; ++b, at += kInt8Block) {
    const size_t n = std::min(kInt8Block, count - at);
    if (Add) {
      int8DecodeAddBlock(run.values + at, n, run.scale(b), out + at);
    } else {
      int8DecodeBlock(run.values + at, n, run.scale(b), out + at);
    }
  }
}

}  // namespace

size_t wireBytes(Compress c, size_t count) {
  switch (c) {
    case Compress::kNone: return count * 4;
    case Compress::kBf16: return count * 2;
    case Compress::kInt8: return int8Blocks(count) * 4 + count;
  }
  return count * 4;
}

void encode(Compress c, const float* in, size_t count, void* wire) {
  refuseNone(c);
  if (c == Compress::kBf16) return bf16Encode(in, count, static_cast<uint16_t*>(wire));
  char* scales = static_cast<char*>(wire);
  int8_t* values = reinterpret_cast<int8_t*>(scales + int8Blocks(count) * 4);
  for (size_t b = 0, at = 0; at < count; ++b, at += kInt8Block) {
    const float s = int8EncodeBlock(in + at, std::min(kInt8Block, count - at), values + at);
    std::memcpy(scales + b * 4, &s, 4);
  }
}

void decode(Compress c, const void* wire, size_t count, float* out) { decodeInto<false>(c, wire, count, out); }

void decodeAdd(Compress c, const void* wire, size_t count, float* acc) { decodeInto<true>(c, wire, count, acc); }

}  // namespace pycollect
