#include "collectives/recv_reduce.h"

#include <algorithm>
#include <vector>

#include "reduce/reduce.h"

namespace pycollect {

size_t recvReduceScratch(const Context& ctx, size_t count, DType dtype) {
  const size_t es = dtypeSize(dtype);
  Segments segs(count, std::max<size_t>(1, ctx.tunables.segmentBytes / es));
  const size_t slots = std::min(segs.count, static_cast<size_t>(std::max(1, ctx.tunables.inflight)));
  return slots * segs.per * es;
}

void recvReduce(Context& ctx, Link& from, char* dst, size_t count, DType dtype, ReduceOp op,
                char* scratch) {
  if (count == 0) return;
  const size_t es = dtypeSize(dtype);
  Segments segs(count, std::max<size_t>(1, ctx.tunables.segmentBytes / es));
  // `slots` segments are posted ahead, each into its own slot of scratch; a slot is
  // posted again as soon as its segment was reduced (as the ring does).
  const size_t slots = std::min(segs.count, static_cast<size_t>(std::max(1, ctx.tunables.inflight)));
  auto slot = [&](size_t j) { return scratch + (j % slots) * segs.per * es; };
  auto length = [&](size_t j) { return segs.size(j, count); };
  std::vector<uint64_t> tickets(segs.count);
  for (size_t j = 0; j < slots; ++j) tickets[j] = from.postRecv(slot(j), length(j) * es);
  for (size_t j = 0; j < segs.count; ++j) {
    char* out = dst + segs.begin(j, count) * es;
    ctx.waitRecv(from, tickets[j]);
    reduce(out, out, slot(j), length(j), dtype, op);
    if (j + slots < segs.count) tickets[j + slots] = from.postRecv(slot(j), length(j + slots) * es);
  }
}

}  // namespace pycollect
