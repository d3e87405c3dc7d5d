// Hierarchical broadcast: the buffer crosses the network once into each host, down a
// chain of one rank per host, and is passed on within each host over shared memory.
//
//   1. chain across hosts: the root, then local rank 0 of each other host, hosts in
//      order from the root's (broadcast_chain.cc on those ranks);
//   2. chain within each host from the rank that got it.
// The flat chain along the group's ring crosses the network wherever two neighbours
// sit on different hosts: h - 1 times when each host's ranks are consecutive (then it
// is as good, and pipelines the two levels where this one runs them one after the
// other), up to n - 1 times when they are interleaved. Only then is this one faster.
//
// Worked example, hosts [0, 2] [1, 3] (interleaved), root 0: the flat chain 0 -> 1 -> 2
// -> 3 crosses the network three times; here 0 -> 1 across, then 0 -> 2 and 1 -> 3
// within the hosts: once.
#include <algorithm>

#include "collectives/collectives.h"
#include "collectives/levels.h"

namespace pycollect {

void broadcastHierarchical(Context& ctx, void* data, size_t bytes, int root) {
  const Hierarchy& hy = ctx.hierarchy();
  const int rootHost = hy.hostOf(root);
  std::vector<int> heads;  // the rank of each host that the inter-host chain reaches
  for (int h = 0; h < hy.hosts(); ++h) heads.push_back(h == rootHost ? root : hy.ranksOf(h)[0]);
  const std::vector<int>& host = hy.ranksOf(hy.host());
  const int head = heads[hy.host()];
  const bool isHead = ctx.rank == head;
  std::vector<std::vector<int>> views{host};
  if (isHead) views.push_back(heads);
  ctx.exchangeHeaders(levelPeers(ctx, views, {}));
  if (ctx.size == 1 || bytes == 0) return;
  if (isHead && hy.hosts() > 1) {
    Context inter(ctx, heads, "inter-host");
    broadcastChain(inter, data, bytes, rootHost);
  }
  Context intra(ctx, host, "intra-host");
  broadcastChain(intra, data, bytes, static_cast<int>(std::find(host.begin(), host.end(), head) - host.begin()));
  ctx.drainSends();
}

}  // namespace pycollect
