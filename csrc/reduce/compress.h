// The wire formats of a compressed all-reduce (compress="bf16" | "int8"): how float32
// values are encoded for the network and decoded back. The algorithms that use them are
// collectives/compressed_ring.h and allreduce_compressed.cc; what crosses a cable is the
// encoded bytes, what is added up is always float32.
//
// bf16: each value rounded to nearest-even to bfloat16 (float32's exponent, 8 bits of
//   mantissa), 2 bytes. One encode errs by at most 2^-8 of the value (relative).
// int8: blocks of kInt8Block values; each block is sent as one float32 scale
//   s = max|x| / 127 and one int8 q = round(x / s) per value (decoded as q * s). One encode
//   errs by at most s / 2 = max|x| / 254 of the block. An encoded run of `count` values is
//   [ceil(count / kInt8Block) scales][count int8s], so runs whose lengths are multiples of
//   kInt8Block can be laid back to back: wireBytes is additive over them.
//   A block holding an inf or a NaN decodes to NaNs (its scale is NaN).
//
// Decoding is exact arithmetic on the bytes (a shift, or one rounded multiply), so the same
// bytes decode to the same floats on every rank: that is what makes every rank's result
// bit-identical.
#pragma once

#include <cstddef>

#include "common/types.h"

namespace pycollect {

constexpr size_t kInt8Block = 256;

// Bytes that `count` float32 values take on the wire in format `c` (kNone: 4 each).
size_t wireBytes(Compress c, size_t count);
// wire <- encode(in); in and wire must not overlap.
void encode(Compress c, const float* in, size_t count, void* wire);
// out <- decode(wire).
void decode(Compress c, const void* wire, size_t count, float* out);
// acc += decode(wire), in float32.
void decodeAdd(Compress c, const void* wire, size_t count, float* acc);

}  // namespace pycollect
