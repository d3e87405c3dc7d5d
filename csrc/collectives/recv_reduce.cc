#include "collectives/recv_reduce.h"

#include <algorithm>
#include <vector>

#include "reduce/reduce.h"

namespace pycollect {

void recvReduce(Context& ctx, Link& from, char* dst, size_t count, DType dtype, ReduceOp op,
                char* scratch) {
  if (count == 0) return;
  const size_t es = dtypeSize(dtype);
  Segments segs(count, std::max<size_t>(1, ctx.tunables.segmentBytes / es));
  // Every segment has its own place in scratch, so all receives are posted at once.
  std::vector<uint64_t> tickets(segs.count);
  for (size_t j = 0; j < segs.count; ++j) {
    const size_t b = segs.begin(j, count);
    tickets[j] = from.postRecv(scratch + b * es, (segs.end(j, count) - b) * es);
  }
  for (size_t j = 0; j < segs.count; ++j) {
    const size_t b = segs.begin(j, count);
    ctx.waitRecv(from, tickets[j]);
    reduce(dst + b * es, dst + b * es, scratch + b * es, segs.end(j, count) - b, dtype, op);
  }
}

}  // namespace pycollect
