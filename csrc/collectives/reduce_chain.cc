// Pipelined chain reduce to a root.
//
// Ranks are ordered along the ring starting at `root`: position 0 is the root,
// position p is rank root+p. Partial results flow the other way from a broadcast's:
// the rank at the last position sends its buffer to its left neighbour; every rank
// in between receives the partial from its right neighbour, combines it with its own
// data (partial op mine, in scratch) and forwards the result to its left; the root
// combines the last partial into its buffer. Segment by segment, so every link is busy
// at once: time ~ (bytes + (size-2) * segment) / bandwidth, each byte crossing each
// link once. Only the root's buffer changes (AVG: a sum, divided at the root).
//
// Example with 4 ranks, root 1 (positions: 1 -> 0, 2 -> 1, 3 -> 2, 0 -> 3):
//   rank 0 sends x0 to rank 3; rank 3 sends x0+x3 to rank 2; rank 2 sends x0+x3+x2 to
//   rank 1, which ends with x1 + (x0+x3+x2).
#include <cstring>

#include "collectives/collectives.h"
#include "reduce/reduce.h"

namespace pycollect {

void reduceChain(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op, int root) {
  const int n = ctx.size;
  ctx.exchangeHeaders(ctx.ringPeers());
  if (n == 1 || count == 0) {
    if (op == ReduceOp::kAvg) divide(data, count, dtype, n);
    return;
  }
  const int position = ctx.wrap(ctx.rank - root);
  const bool receives = position < n - 1;  // from the right
  const bool sends = position > 0;         // to the left
  const size_t es = dtypeSize(dtype);
  char* mine = static_cast<char*>(data);
  char* partial = receives ? ctx.scratch(count * es) : nullptr;
  Segments segs = pipelineSegments(ctx, count, es);
  Link& left = ctx.link(ctx.left());
  Link& right = ctx.link(ctx.right());
  auto at = [&](char* base, size_t j) { return base + segs.begin(j, count) * es; };
  auto elems = [&](size_t j) { return segs.size(j, count); };

  std::vector<uint64_t> tickets(receives ? segs.count : 0);
  for (size_t j = 0; j < tickets.size(); ++j) tickets[j] = right.postRecv(at(partial, j), elems(j) * es);
  for (size_t j = 0; j < segs.count; ++j) {
    ctx.setStep("chain", n - 1 - position, n - 1);
    if (!receives) {
      left.postSend(at(mine, j), elems(j) * es);
      continue;
    }
    ctx.waitRecv(right, tickets[j]);
    if (sends) {
      reduce(at(partial, j), at(partial, j), at(mine, j), elems(j), dtype, op);
      left.postSend(at(partial, j), elems(j) * es);
    } else {
      reduce(at(mine, j), at(mine, j), at(partial, j), elems(j), dtype, op);
    }
  }
  if (!sends && op == ReduceOp::kAvg) divide(data, count, dtype, n);
  ctx.drainSends();
}

}  // namespace pycollect
