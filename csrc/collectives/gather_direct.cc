// Direct gather to a root (a flat tree, as Gloo's gather).
//
// Every other rank sends its buffer to the root in one message, right behind its call
// header; the root posts a receive for each rank straight into that rank's output
// span, so all of them are in flight together. Sizes may differ by rank: the root's
// header to rank p carries the count it expects from p, and each side checks the
// other's, so a rank whose input does not match the root's slot for it gets a
// MismatchError naming both calls before its payload is used.
//
// Example with 3 ranks, root 0: ranks 1 and 2 send x1 (2 elements) and x2 (5
// elements); rank 0 copies x0 into outs[0] and receives into outs[1] and outs[2].
#include <cstring>

#include "collectives/collectives.h"

namespace pycollect {

void gatherDirect(Context& ctx, Span in, const std::vector<Span>& outs, DType dtype, int root) {
  const size_t es = dtypeSize(dtype);
  if (ctx.rank != root) {
    ctx.postHeaders({root});
    ctx.link(root).postSend(in.data, in.count * es);
    ctx.checkHeaders();
    ctx.drainSends();
    return;
  }
  std::vector<int> peers;
  std::vector<uint64_t> counts;
  for (int p = 0; p < ctx.size; ++p) {
    if (p == root) continue;
    peers.push_back(p);
    counts.push_back(outs[p].count);
  }
  ctx.postHeaders(peers, &counts);
  std::vector<uint64_t> tickets = ctx.postRecvs(peers, outs, es);
  if (in.count > 0 && outs[root].data != in.data) std::memmove(outs[root].data, in.data, in.count * es);
  ctx.checkHeaders(&counts);
  ctx.waitRecvs(peers, tickets, "gather");
  ctx.drainSends();
}

}  // namespace pycollect
