// Receive-and-reduce of one whole message, for the halving-doubling all-reduce: the
// message arrives in segments of tunables.segmentBytes, and each segment is reduced
// into place while the next ones are still on the wire.
#pragma once

#include <cstddef>

#include "collectives/context.h"
#include "common/types.h"

namespace pycollect {

// Receives `count` elements from `from` and reduces them into `dst`: dst[i] = dst[i] op
// received[i]. `scratch` holds tunables.inflight segments (recvReduceScratch bytes for
// the largest `count` of the call). Returns once all are reduced.
void recvReduce(Context& ctx, Link& from, char* dst, size_t count, DType dtype, ReduceOp op,
                char* scratch);
size_t recvReduceScratch(const Context& ctx, size_t count, DType dtype);

}  // namespace pycollect
