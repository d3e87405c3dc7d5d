// Ring all-reduce = ring reduce-scatter followed by ring all-gather.
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
// Pipelining: each chunk is cut into segments of tunables.segmentBytes. A unit is
// (step, segment); unit (s, j) may be sent as soon as unit (s-1, j) was reduced,
// so a rank sends, receives and reduces at the same time. `inflight` receive
// slots are posted ahead. All ranks reduce every chunk in the same order along the
// ring and then copy it, so every rank ends with bit-identical results.
#include <cstring>

#include "collectives/collectives.h"
#include "reduce/reduce.h"

namespace pycollect {

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
  const size_t units = static_cast<size_t>(steps) * nseg;
  const int slots = std::max(1, ctx.tunables.inflight);
  char* scratch = ctx.scratch(static_cast<size_t>(slots) * segs.per * es);
  Link& right = ctx.link(ctx.right());
  Link& left = ctx.link(ctx.left());

  auto mod = [n](int x) { return ((x % n) + n) % n; };
  // Element range of segment j of chunk c.
  auto segBegin = [&](int c, size_t j) { return chunks.offset(c) + segs.begin(j, chunks.length(c)); };
  auto segLen = [&](int c, size_t j) {
    size_t len = chunks.length(c);
    return segs.size(j, len);
  };
  auto rsRecvChunk = [&](size_t u) { return mod(r - static_cast<int>(u / nseg) - 1); };
  auto agRecvChunk = [&](size_t u) { return mod(r - static_cast<int>(u / nseg)); };

  // Reduce-scatter, step 0: send our own chunk r whole (segment by segment).
  for (size_t j = 0; j < nseg; ++j) {
    ctx.setUnit("reduce-scatter", 0, r, j);
    right.postSend(base + segBegin(r, j) * es, segLen(r, j) * es);
  }
  std::vector<uint64_t> rsTickets(units), agTickets(units);
  size_t posted = 0;
  bool agPosted = false;
  auto postRsRecv = [&](size_t u) {
    int c = rsRecvChunk(u);
    ctx.setUnit("reduce-scatter", static_cast<int>(u / nseg), c, u % nseg);
    rsTickets[u] = left.postRecv(scratch + (u % slots) * segs.per * es, segLen(c, u % nseg) * es);
  };
  // The all-gather receives queue behind the last reduce-scatter receive and go
  // straight into `data`: each arrives only after this rank's send of that range
  // left (the data went around the ring first), so no send is overwritten.
  auto postAgRecvs = [&] {
    for (size_t u = 0; u < units; ++u) {
      int c = agRecvChunk(u);
      ctx.setUnit("all-gather", static_cast<int>(u / nseg), c, u % nseg);
      agTickets[u] = left.postRecv(base + segBegin(c, u % nseg) * es, segLen(c, u % nseg) * es);
    }
    agPosted = true;
  };
  for (; posted < units && posted < static_cast<size_t>(slots); ++posted) postRsRecv(posted);
  if (posted == units) postAgRecvs();

  for (size_t u = 0; u < units; ++u) {
    const int s = static_cast<int>(u / nseg);
    const size_t j = u % nseg;
    const int c = rsRecvChunk(u);
    ctx.setStep("reduce-scatter", s, steps);
    ctx.waitRecv(left, rsTickets[u]);
    char* dst = base + segBegin(c, j) * es;
    const size_t len = segLen(c, j);
    ctx.setUnit("reduce-scatter", s, c, j);
    reduce(dst, dst, scratch + (u % slots) * segs.per * es, len, dtype, op);
    if (s == steps - 1 && op == ReduceOp::kAvg) divide(dst, len, dtype, n);
    if (posted < units) postRsRecv(posted++);  // reuse the slot just consumed
    if (posted == units && !agPosted) postAgRecvs();
    // Forward: at the next reduce-scatter step, or (last step) as all-gather step 0.
    if (s + 1 < steps) {
      ctx.setUnit("reduce-scatter", s + 1, c, j);
    } else {
      ctx.setUnit("all-gather", 0, c, j);
    }
    right.postSend(dst, len * es);
  }

  for (size_t u = 0; u < units; ++u) {
    const int s = static_cast<int>(u / nseg);
    ctx.setStep("all-gather", s, steps);
    ctx.waitRecv(left, agTickets[u]);
    if (s + 1 < steps) {
      int c = agRecvChunk(u);
      ctx.setUnit("all-gather", s + 1, c, u % nseg);
      right.postSend(base + segBegin(c, u % nseg) * es, segLen(c, u % nseg) * es);
    }
  }
  ctx.drainSends();
}

}  // namespace pycollect
