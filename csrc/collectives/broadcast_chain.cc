// Pipelined chain broadcast.
//
// Ranks are ordered along the ring starting at `root`: root, root+1, ...,
// root-1. Each rank receives the buffer from its left neighbour and forwards it
// to its right one, segment by segment, so the last rank starts receiving after
// one segment time, not after the whole buffer: time ~ (bytes + (size-2) *
// segment) / bandwidth.
//
// Example with 4 ranks, root 2: 2 -> 3 -> 0 -> 1; rank 1 only receives.
#include "collectives/collectives.h"

namespace pycollect {

void broadcastChain(Context& ctx, void* data, size_t bytes, int root) {
  const int n = ctx.size;
  ctx.exchangeHeaders(ctx.ringPeers());
  if (n == 1 || bytes == 0) return;
  const int position = ctx.wrap(ctx.rank - root);  // 0 at the root
  const bool receives = position > 0;
  const bool forwards = position < n - 1;
  char* base = static_cast<char*>(data);
  Segments segs(bytes, ctx.tunables.segmentBytes);
  Link& right = ctx.link(ctx.right());
  Link& left = ctx.link(ctx.left());
  if (!receives) {
    for (size_t j = 0; j < segs.count; ++j) {
      ctx.setUnit("chain", position, -1, j);
      right.postSend(base + segs.begin(j, bytes), segs.size(j, bytes));
    }
  } else {
    std::vector<uint64_t> tickets(segs.count);
    for (size_t j = 0; j < segs.count; ++j) {
      ctx.setUnit("chain", position - 1, -1, j);
      tickets[j] = left.postRecv(base + segs.begin(j, bytes), segs.size(j, bytes));
    }
    for (size_t j = 0; j < segs.count; ++j) {
      ctx.setStep("chain", static_cast<int>(position), n);
      ctx.waitRecv(left, tickets[j]);
      if (forwards) {
        ctx.setUnit("chain", position, -1, j);
        right.postSend(base + segs.begin(j, bytes), segs.size(j, bytes));
      }
    }
  }
  ctx.drainSends();
}

}  // namespace pycollect
