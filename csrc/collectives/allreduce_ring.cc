// Ring all-reduce = ring reduce-scatter followed by ring all-gather, a block of
// segments at a time.
//
// The `count` elements are cut into `size` chunks (sizes differ by at most one).
// Rank r sends to its right neighbour r+1 and receives from its left one r-1.
//
// Reduce-scatter phase, steps s = 0 .. size-2:
//   send chunk (r - s) mod size, receive chunk (r - s - 1) mod size into a scratch
//   slot and reduce it into our copy of that chunk.
//   After size-1 steps rank r holds chunk (r + 1) mod size fully reduced.
// All-gather phase, steps s = 0 .. size-2:
//   send chunk (r + 1 - s) mod size, receive chunk (r - s) mod size straight into
//   `data` (it is final: nothing to reduce).
//
// Example with 3 ranks and chunks A B C, every rank holding its own values:
//   RS step 0: rank 0 sends A, gets C from rank 2 and adds it: C = C0+C2
//              rank 1 sends B, gets A: A = A1+A0;  rank 2 sends C, gets B: B = B2+B1
//   RS step 1: rank 0 sends C (C0+C2) to 1, gets B (B2+B1) from 2: B done at rank 0,
//              likewise A done at rank 2 and C done at rank 1.
//   AG steps 0 and 1 pass the finished chunks once around the ring.
//
// Pipelining. Each chunk is cut into segments of tunables.segmentBytes; call the 2(size-1)
// steps a segment goes through its stages t (reduce-scatter step t, then all-gather step
// t - (size-1)). Stage t of a segment is sent as soon as stage t-1 of it was received (and
// reduced), and stage 0, our own input, needs nothing. The segments go in blocks of
// kBlockSegments: a block's segments pass stage 0, then stage 1, .., then the next block
// starts. Every link carries the units (segment, stage) in that order, and each rank
// posts its receives in it, so the order is the protocol:
//   2 ranks, 4 segments a-d (stages 0 and 1):  a0 b0 a1 b1 | c0 d0 c1 d1
// Why blocks. One block for the whole chunk (every segment's stage 0, then every
// segment's stage 1, ..) moves the same bytes, but then a segment reduced at the last
// reduce-scatter step is forwarded a whole chunk later, back from DRAM once the chunk
// outgrows the cache. With short blocks it is forwarded while still in the cache; two
// segments rather than one keep a link busy while the other segment is reduced. Blocks
// of two were never far from the fastest and never the slowest, at 2 to 4 ranks
// (docs/measurements.md, "Ring all-reduce").
//
// `inflight` scratch slots take the reduce-scatter receives, posted ahead in link
// order; all-gather receives go straight into `data`. All ranks reduce every chunk in
// the same order along the ring and then copy it, so every rank ends with
// bit-identical results.
#include <algorithm>
#include <vector>

#include "collectives/collectives.h"
#include "reduce/reduce.h"

namespace pycollect {

namespace {

// The link order: unit u is (segment, stage); blocks of `block` segments, each through
// every stage before the next block (the last block may be narrower).
struct BlockOrder {
  struct Unit {
    size_t segment;
    int stage;
  };
  BlockOrder(size_t segments, int stages, size_t block)
      : segments(segments), stages(stages), block(std::max<size_t>(1, std::min(block, segments))) {}
  size_t size() const { return segments * stages; }
  Unit operator[](size_t u) const {
    const size_t first = u / (block * stages) * block, width = std::min(block, segments - first);
    const size_t i = u - first * stages;
    return {first + i % width, static_cast<int>(i / width)};
  }
  // The u of unit (j, t).
  size_t position(size_t j, int t) const {
    const size_t first = j / block * block, width = std::min(block, segments - first);
    return first * stages + t * width + (j - first);
  }
  size_t segments;
  int stages;
  size_t block;
};

}  // namespace

void allreduceRing(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  const int n = ctx.size;
  const int r = ctx.rank;
  ctx.exchangeHeaders(ctx.ringPeers());
  if (n == 1 || count == 0) {
    if (op == ReduceOp::kAvg && n > 1) divide(data, count, dtype, n);
    return;
  }
  const size_t es = dtypeSize(dtype);
  char* base = static_cast<char*>(data);
  Chunks chunks(count, n);
  Segments segs = pipelineSegments(ctx, chunks.length(0), es);
  const size_t nseg = segs.count;
  const int steps = n - 1;
  const int stages = 2 * steps;  // of each segment: reduce-scatter steps, then all-gather steps
  const size_t slots = static_cast<size_t>(std::max(1, ctx.tunables.inflight));
  char* scratch = ctx.scratch(slots * segs.per * es);
  Link& right = ctx.link(ctx.right());
  Link& left = ctx.link(ctx.left());

  // The chunk received at stage t: reduce-scatter step t gets chunk r-t-1, all-gather
  // step s = t - steps gets chunk r-s. Stage t+1 sends what stage t received.
  auto recvChunk = [&](int t) { return t < steps ? ctx.wrap(r - t - 1) : ctx.wrap(r - (t - steps)); };
  auto phase = [&](int t) { return t < steps ? "reduce-scatter" : "all-gather"; };
  auto step = [&](int t) { return t < steps ? t : t - steps; };
  auto segPtr = [&](int c, size_t j) { return base + (chunks.offset(c) + segs.begin(j, chunks.length(c))) * es; };
  auto segLen = [&](int c, size_t j) { return segs.size(j, chunks.length(c)); };
  auto slot = [&](size_t i) { return scratch + (i % slots) * segs.per * es; };

  const BlockOrder order(nseg, stages, kBlockSegments);  // the link order, as above
  const size_t units = order.size();

  // Receives are posted in link order, the reduce-scatter ones only while a scratch slot
  // is free; they are consumed in that order too, so the i-th takes slot i. An all-gather
  // receive writes `data` early, but its bytes arrive only after they went around the
  // ring, through this rank's send of them.
  std::vector<uint64_t> tickets(units);
  size_t posted = 0, rsPosted = 0, rsDone = 0;
  auto postReceives = [&] {
    for (; posted < units; ++posted) {
      const auto [j, t] = order[posted];
      const int c = recvChunk(t);
      if (t < steps && rsPosted - rsDone == slots) break;
      ctx.setUnit(phase(t), step(t), c, j);
      void* into = t < steps ? slot(rsPosted++) : segPtr(c, j);
      tickets[posted] = left.postRecv(into, segLen(c, j) * es);
    }
  };
  // Sends in link order too, each once the receive it forwards is done (the first
  // `received` units of the order).
  size_t received = 0, sent = 0;
  auto postSends = [&] {
    for (; sent < units; ++sent) {
      const auto [j, t] = order[sent];
      if (t > 0 && order.position(j, t - 1) >= received) break;
      const int c = t == 0 ? r : recvChunk(t - 1);
      ctx.setUnit(phase(t), step(t), c, j);
      right.postSend(segPtr(c, j), segLen(c, j) * es);
    }
  };
  postReceives();
  postSends();
  for (size_t u = 0; u < units; ++u) {
    const auto [j, t] = order[u];
    const int c = recvChunk(t);
    ctx.setStep(phase(t), step(t), steps);
    ctx.waitRecv(left, tickets[u]);
    if (t < steps) {
      char* dst = segPtr(c, j);
      ctx.setUnit("reduce-scatter", t, c, j);
      reduce(dst, dst, slot(rsDone++), segLen(c, j), dtype, op);
      if (t == steps - 1 && op == ReduceOp::kAvg) divide(dst, segLen(c, j), dtype, n);
    }
    received = u + 1;
    postReceives();  // into the slot just consumed
    postSends();
  }
  ctx.drainSends();
}

}  // namespace pycollect
