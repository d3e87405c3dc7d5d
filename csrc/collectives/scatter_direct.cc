// Direct scatter from a root (a flat tree, as Gloo's scatter): gather run backwards.
//
// The root sends ins[p] to every other rank p right behind its call header, all at
// once; each rank receives its span straight into `out`. Sizes may differ by rank:
// the root's header to rank p carries ins[p]'s count and rank p checks it against the
// size of its `out`, so a disagreement is a MismatchError naming both calls.
//
// Example with 3 ranks, root 2: rank 2 sends ins[0] to rank 0 and ins[1] to rank 1,
// and copies ins[2] into its own `out`.
#include <cstring>

#include "collectives/collectives.h"

namespace pycollect {

void scatterDirect(Context& ctx, const std::vector<Span>& ins, Span out, DType dtype, int root) {
  const size_t es = dtypeSize(dtype);
  if (ctx.rank != root) {
    ctx.postHeaders({root});
    uint64_t ticket = ctx.link(root).postRecv(out.data, out.count * es);
    ctx.checkHeaders();
    ctx.setStep("scatter", 0, 1);
    ctx.waitRecv(ctx.link(root), ticket);
    ctx.drainSends();
    return;
  }
  std::vector<int> peers;
  std::vector<uint64_t> counts;
  for (int k = 1; k < ctx.size; ++k) {  // ring order from the root
    int p = (root + k) % ctx.size;
    peers.push_back(p);
    counts.push_back(ins[p].count);
  }
  ctx.postHeaders(peers, &counts);
  for (int p : peers) ctx.link(p).postSend(ins[p].data, ins[p].count * es);
  if (out.count > 0 && ins[root].data != out.data) std::memmove(out.data, ins[root].data, out.count * es);
  ctx.checkHeaders(&counts);
  ctx.drainSends();
}

}  // namespace pycollect
