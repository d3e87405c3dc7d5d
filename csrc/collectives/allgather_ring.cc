// Ring all-gather.
//
// `out` is `size` chunks of `count` elements; rank r starts with its input in
// chunk r. At step s = 0 .. size-2 rank r sends chunk (r - s) mod size to its right
// neighbour and receives chunk (r - s - 1) mod size from its left one, straight
// into `out`: after size-1 steps every chunk has been around the ring.
//
// Example with 3 ranks holding A (rank 0), B (rank 1), C (rank 2):
//   step 0: 0 sends A to 1, 1 sends B to 2, 2 sends C to 0  -> 0: A.C  1: AB.  2: .BC
//   step 1: 0 sends C to 1, 1 sends A to 2, 2 sends B to 0  -> everyone: ABC
//
// Pipelining: chunks are cut into segments; a received segment is forwarded at
// once, so step s+1 of a segment overlaps step s of the next one. Each byte
// crosses each link once: per rank (size-1)*count elements sent and received.
// Our own chunk is sent straight from `in`, and copied into `out` segment by
// segment while the transfer runs, instead of before it starts.
//
// Blocks. The same ring moves any "chunk" made of ranges of the buffer (blocks.h):
// the hierarchical algorithms gather a rail's ranks' slots, or a host's. A block goes
// as its ranges' segments in order; both neighbours cut it alike, as every rank knows
// every block.
#include <cstring>

#include "collectives/collectives.h"

namespace pycollect {

void allgatherRingBlocks(Context& ctx, char* base, const std::vector<Block>& blocks, const char* own,
                         DType dtype) {
  const int n = ctx.size;
  const int r = ctx.rank;
  const size_t es = dtypeSize(dtype);
  ctx.exchangeHeaders(ctx.ringPeers());
  const size_t per = std::max<size_t>(1, ctx.tunables.segmentBytes / es);
  const std::vector<BlockUnit> mine = unitsOf(blocks[r], per);
  auto at = [&](const BlockUnit& u) { return base + u.offset * es; };
  auto ownSrc = [&](const BlockUnit& u) { return own != nullptr ? own + u.position * es : at(u); };
  // One unit of our own block into place per unit received (the sends read `own`, so
  // the copy never races them); memmove: `own` may overlap the buffer.
  size_t copied = 0;
  auto copyOwn = [&](size_t upTo) {
    for (upTo = std::min(upTo, mine.size()); own != nullptr && copied < upTo; ++copied) {
      std::memmove(at(mine[copied]), ownSrc(mine[copied]), mine[copied].length * es);
    }
  };
  if (n == 1) return copyOwn(mine.size());
  const int steps = n - 1;
  Link& right = ctx.link(ctx.right());
  Link& left = ctx.link(ctx.left());

  // Every receive goes to its final place, so all of them can be posted now.
  std::vector<std::vector<BlockUnit>> incoming(steps);
  std::vector<std::vector<uint64_t>> tickets(steps);
  for (int s = 0; s < steps; ++s) {
    const int c = ctx.wrap(r - s - 1);
    incoming[s] = unitsOf(blocks[c], per);
    for (size_t k = 0; k < incoming[s].size(); ++k) {
      ctx.setUnit("all-gather", s, c, k);
      tickets[s].push_back(left.postRecv(at(incoming[s][k]), incoming[s][k].length * es));
    }
  }
  for (size_t k = 0; k < mine.size(); ++k) {
    ctx.setUnit("all-gather", 0, r, k);
    right.postSend(ownSrc(mine[k]), mine[k].length * es);
  }
  size_t received = 0;
  for (int s = 0; s < steps; ++s) {
    for (size_t k = 0; k < incoming[s].size(); ++k) {
      ctx.setStep("all-gather", s, steps);
      ctx.waitRecv(left, tickets[s][k]);
      if (s + 1 < steps) {
        ctx.setUnit("all-gather", s + 1, ctx.wrap(r - s - 1), k);
        right.postSend(at(incoming[s][k]), incoming[s][k].length * es);
      }
      copyOwn(++received);
    }
  }
  copyOwn(mine.size());
  ctx.drainSends();
}

void allgatherRing(Context& ctx, const void* in, void* out, size_t count, DType dtype) {
  const std::vector<Block> blocks = rankSlots(ctx.size, count);
  char* base = static_cast<char*>(out);
  const char* src = static_cast<const char*>(in);
  const bool inPlace = src == base + ctx.rank * count * dtypeSize(dtype);
  allgatherRingBlocks(ctx, base, blocks, inPlace ? nullptr : src, dtype);
}

}  // namespace pycollect
