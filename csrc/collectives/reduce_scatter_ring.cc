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
//
// Blocks. As the ring all-gather, it reduces any "chunks" made of ranges of `in`
// (blocks.h): rank r ends with block r's reduction in `out`, its ranges back to back.
// The accumulators then hold a block packed (its positions); a unit of step s+2 waits
// for the sends of step s that read the positions it overwrites.
#include <cstring>

#include "collectives/collectives.h"
#include "reduce/reduce.h"

namespace pycollect {

void reduceScatterRingBlocks(Context& ctx, const char* in, const std::vector<Block>& blocks, char* out,
                             DType dtype, ReduceOp op) {
  const int n = ctx.size;
  const int r = ctx.rank;
  const size_t es = dtypeSize(dtype);
  ctx.exchangeHeaders(ctx.ringPeers());
  if (n == 1) {
    for (const BlockUnit& u : unitsOf(blocks[r], SIZE_MAX)) {
      if (out + u.position * es != in + u.offset * es) std::memmove(out + u.position * es, in + u.offset * es, u.length * es);
    }
    return;
  }
  const size_t per = std::max<size_t>(1, ctx.tunables.segmentBytes / es);
  const int steps = n - 1;
  // The units received, in link order: step s brings block r-s-2's partial sums.
  struct Recv {
    int step;
    size_t k;
    BlockUnit unit;
  };
  std::vector<Recv> units;
  std::vector<size_t> stepStart;
  size_t maxBlock = 0;
  for (const Block& b : blocks) maxBlock = std::max(maxBlock, blockLength(b));
  for (int s = 0; s < steps; ++s) {
    stepStart.push_back(units.size());
    const std::vector<BlockUnit> us = unitsOf(blocks[ctx.wrap(r - s - 2)], per);
    for (size_t k = 0; k < us.size(); ++k) units.push_back({s, k, us[k]});
  }
  stepStart.push_back(units.size());
  const size_t slots = static_cast<size_t>(std::max(1, ctx.tunables.inflight));
  const size_t slotBytes = per * es;
  // Scratch: `slots` receive slots, then the two accumulators (steps alternate).
  const size_t accCount = n > 2 ? 2 : 0;
  char* scratch = ctx.scratch(slots * slotBytes + accCount * maxBlock * es);
  char* acc = scratch + slots * slotBytes;
  Link& right = ctx.link(ctx.right());
  Link& left = ctx.link(ctx.left());

  std::vector<uint64_t> tickets(units.size());
  std::vector<uint64_t> forwarded(units.size());  // send ticket of each unit's partial sum
  size_t posted = 0;
  auto postRecv = [&](size_t u) {
    ctx.setUnit("reduce-scatter", units[u].step, ctx.wrap(r - units[u].step - 2), units[u].k);
    tickets[u] = left.postRecv(scratch + (u % slots) * slotBytes, units[u].unit.length * es);
  };
  for (; posted < units.size() && posted < slots; ++posted) postRecv(posted);
  const std::vector<BlockUnit> first = unitsOf(blocks[ctx.wrap(r - 1)], per);
  for (size_t k = 0; k < first.size(); ++k) {
    ctx.setUnit("reduce-scatter", 0, ctx.wrap(r - 1), k);
    right.postSend(in + first[k].offset * es, first[k].length * es);
  }

  size_t guard = 0;  // the next send of step s-2 not yet known to have left
  for (size_t u = 0; u < units.size(); ++u) {
    const auto& [s, k, unit] = units[u];
    const int c = ctx.wrap(r - s - 2);
    ctx.setStep("reduce-scatter", s, steps);
    ctx.waitRecv(left, tickets[u]);
    const bool last = s == steps - 1;
    char* dst = last ? out + unit.position * es : acc + ((s % 2) * maxBlock + unit.position) * es;
    if (!last && s >= 2) {  // same accumulator: the sends of step s-2 that read these positions
      if (k == 0) guard = stepStart[s - 2];
      for (; guard < stepStart[s - 1] && units[guard].unit.position < unit.position + unit.length; ++guard) {
        ctx.waitSend(right, forwarded[guard]);
      }
    }
    ctx.setUnit("reduce-scatter", s, c, k);
    reduce(dst, in + unit.offset * es, scratch + (u % slots) * slotBytes, unit.length, dtype, op);
    if (posted < units.size()) postRecv(posted++);
    if (last) {
      if (op == ReduceOp::kAvg) divide(dst, unit.length, dtype, n);
    } else {
      ctx.setUnit("reduce-scatter", s + 1, c, k);
      forwarded[u] = right.postSend(dst, unit.length * es);
    }
  }
  ctx.drainSends();
}

void reduceScatterRing(Context& ctx, const void* in, void* out, size_t count, DType dtype,
                       ReduceOp op) {
  const std::vector<Block> blocks = rankSlots(ctx.size, count);
  reduceScatterRingBlocks(ctx, static_cast<const char*>(in), blocks, static_cast<char*>(out), dtype, op);
}

}  // namespace pycollect
