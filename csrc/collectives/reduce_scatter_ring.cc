// Ring reduce-scatter.
//
// `in` is `size` chunks of `count` elements; rank r must end with chunk r reduced
// over all ranks, in `out`. The chain for chunk c starts at rank c+1 and ends at
// rank c. At step s = 0 .. size-2 rank r sends chunk (r - s - 1) mod size and
// receives chunk (r - s - 2) mod size, which it reduces with its own input of that
// chunk: into a scratch accumulator, or at the last step straight into `out`.
//
// Example with 3 ranks, chunks A B C:
//   step 0: rank 0 sends C0, rank 1 sends A1, rank 2 sends B2
//           rank 0 gets B2 -> acc B = B0+B2, rank 1 gets C0 -> C1+C0, rank 2 gets A1 -> A2+A1
//   step 1: rank 0 sends B, gets A (A2+A1) -> out = A0+A2+A1;  rank 1 ends with B,
//           rank 2 with C.
//
// `in` is never written. Segments pipeline as in the ring all-reduce: unit (s, j)
// is forwarded as soon as it was reduced. The partial sums live in two chunk-sized
// accumulators used by alternate steps (none at 2 ranks, where the only step writes
// `out`): before step s+2 overwrites segment j of the accumulator of step s, the
// send of that segment must have left, which it almost always has by then.
#include <cstring>

#include "collectives/collectives.h"
#include "reduce/reduce.h"

namespace pycollect {

void reduceScatterRing(Context& ctx, const void* in, void* out, size_t count, DType dtype,
                       ReduceOp op) {
  const int n = ctx.size;
  const int r = ctx.rank;
  const size_t es = dtypeSize(dtype);
  ctx.exchangeHeaders(ctx.ringPeers());
  if (count == 0) return;
  const char* src = static_cast<const char*>(in);
  if (n == 1) {
    if (out != in) std::memmove(out, in, count * es);
    return;
  }
  Segments segs = pipelineSegments(ctx, count, es);
  const size_t nseg = segs.count;
  const int steps = n - 1;
  const size_t units = steps * nseg;
  const int slots = std::max(1, ctx.tunables.inflight);
  const size_t slotBytes = segs.per * es;
  // Scratch: `slots` receive slots, then the two accumulators (steps alternate).
  const size_t accCount = n > 2 ? 2 : 0;
  char* scratch = ctx.scratch(slots * slotBytes + accCount * count * es);
  char* acc = scratch + slots * slotBytes;
  Link& right = ctx.link(ctx.right());
  Link& left = ctx.link(ctx.left());
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  auto offset = [&](int c, size_t j) { return (c * count + segs.begin(j, count)) * es; };
  auto segLen = [&](size_t j) { return segs.size(j, count); };

  std::vector<uint64_t> tickets(units);
  std::vector<uint64_t> forwarded(units);  // send ticket of each unit's partial sum
  size_t posted = 0;
  auto postRecv = [&](size_t u) {
    ctx.setUnit("reduce-scatter", static_cast<int>(u / nseg), mod(r - static_cast<int>(u / nseg) - 2), u % nseg);
    tickets[u] = left.postRecv(scratch + (u % slots) * slotBytes, segLen(u % nseg) * es);
  };
  for (; posted < units && posted < static_cast<size_t>(slots); ++posted) postRecv(posted);
  for (size_t j = 0; j < nseg; ++j) {
    ctx.setUnit("reduce-scatter", 0, mod(r - 1), j);
    right.postSend(src + offset(mod(r - 1), j), segLen(j) * es);
  }

  for (size_t u = 0; u < units; ++u) {
    const int s = static_cast<int>(u / nseg);
    const size_t j = u % nseg;
    const int c = mod(r - s - 2);
    ctx.setStep("reduce-scatter", s, steps);
    ctx.waitRecv(left, tickets[u]);
    const bool last = s == steps - 1;
    char* dst = last ? static_cast<char*>(out) + segs.begin(j, count) * es
                     : acc + ((s % 2) * count + segs.begin(j, count)) * es;
    if (!last && s >= 2) ctx.waitSend(right, forwarded[u - 2 * nseg]);  // same accumulator range
    ctx.setUnit("reduce-scatter", s, c, j);
    reduce(dst, src + offset(c, j), scratch + (u % slots) * slotBytes, segLen(j), dtype, op);
    if (posted < units) postRecv(posted++);
    if (last) {
      if (op == ReduceOp::kAvg) divide(dst, segLen(j), dtype, n);
    } else {
      ctx.setUnit("reduce-scatter", s + 1, c, j);
      forwarded[u] = right.postSend(dst, segLen(j) * es);
    }
  }
  ctx.drainSends();
}

}  // namespace pycollect
