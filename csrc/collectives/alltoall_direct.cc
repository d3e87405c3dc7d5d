// Direct all-to-all, list form: rank r sends ins[p] to rank p and receives rank p's
// ins[r] into outs[p], for every p, with sizes that may differ per pair.
//
// Every pair exchanges one message each way, right behind its call header; all
// receives and sends are posted at once (the links carry them concurrently), peers
// in ring order from this rank so that not everyone starts with rank 0. The header to
// rank p carries the count sent to p, and the one from p is checked against
// outs[p]'s size: a pair that disagrees fails with a MismatchError naming both calls.
//
// Example with 3 ranks: rank 1 sends ins[2] to rank 2 and ins[0] to rank 0, receives
// into outs[0] and outs[2], and copies ins[1] to outs[1].
#include <cstring>

#include "collectives/collectives.h"

namespace pycollect {

void alltoallDirect(Context& ctx, const std::vector<Span>& ins, const std::vector<Span>& outs,
                    DType dtype) {
  const size_t es = dtypeSize(dtype);
  const int n = ctx.size;
  std::vector<int> peers;
  std::vector<uint64_t> sendCounts, recvCounts;
  for (int k = 1; k < n; ++k) {
    int p = (ctx.rank + k) % n;
    peers.push_back(p);
    sendCounts.push_back(ins[p].count);
    recvCounts.push_back(outs[p].count);
  }
  ctx.postHeaders(peers, &sendCounts);
  std::vector<uint64_t> tickets = ctx.postRecvs(peers, outs, es);
  for (int p : peers) ctx.link(p).postSend(ins[p].data, ins[p].count * es);
  const Span own = ins[ctx.rank];
  if (own.count > 0 && own.data != outs[ctx.rank].data) {
    std::memmove(outs[ctx.rank].data, own.data, own.count * es);
  }
  ctx.checkHeaders(&recvCounts);
  ctx.waitRecvs(peers, tickets, "exchange");
  ctx.drainSends();
}

}  // namespace pycollect
