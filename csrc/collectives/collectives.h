// The algorithms, one file each. Every function runs on the communicator's worker
// thread, after the arguments were validated, and returns once this rank's part is
// done and every buffer it was given is free again.
#pragma once

#include <cstddef>

#include "collectives/context.h"
#include "common/types.h"

namespace pycollect {

// In place: data holds `count` elements on entry and the reduction on exit.
void allreduceRing(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op);
void allreduceDirect(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op);

// out holds size*count elements; rank r's `count` inputs land at out + r*count.
// `in` may be exactly that slot of `out` (in place).
void allgatherRing(Context& ctx, const void* in, void* out, size_t count, DType dtype);

// in holds size*count elements; out gets the reduction of chunk `rank`.
void reduceScatterRing(Context& ctx, const void* in, void* out, size_t count, DType dtype,
                       ReduceOp op);

// Pipelined chain from `root` along the ring.
void broadcastChain(Context& ctx, void* data, size_t bytes, int root);

// Every rank greets every other: returns once all have arrived.
void barrierAll(Context& ctx);

}  // namespace pycollect
