#include "collectives/levels.h"

#include <algorithm>

#include "collectives/peers.h"

namespace pycollect {

std::vector<int> levelPeers(const Context& ctx, const std::vector<std::vector<int>>& views,
                            const std::vector<int>& partners) {
  std::vector<int> peers;
  for (int p : ctx.ringPeers()) addPeer(peers, p, ctx.rank);
  for (const std::vector<int>& view : views) {
    const int n = static_cast<int>(view.size());
    const int i = static_cast<int>(std::find(view.begin(), view.end(), ctx.rank) - view.begin());
    if (n < 2 || i == n) continue;
    addPeer(peers, view[(i + n - 1) % n], ctx.rank);
    addPeer(peers, view[(i + 1) % n], ctx.rank);
  }
  for (int p : partners) addPeer(peers, p, ctx.rank);
  return peers;
}

Levels::Levels(Context& ctx)
    : hy(ctx.hierarchy()), core(hy.coreOf(hy.host())), rail(hy.rail(std::min(hy.local(), hy.rails() - 1))),
      partners(hy.core() ? hy.extras() : std::vector<int>{hy.partner()}) {
  ctx.exchangeHeaders(levelPeers(ctx, hy.core() ? std::vector<std::vector<int>>{core, rail}
                                                : std::vector<std::vector<int>>{}, partners));
}

std::vector<Block> hostBlocks(const Hierarchy& hy, size_t count) {
  std::vector<Block> blocks(hy.rails());
  for (int h = 0; h < hy.hosts(); ++h) {
    for (int i = 0; i < hy.rails(); ++i) {
      const Block b = slotsOf(hy.members(h, i), count);
      blocks[i].insert(blocks[i].end(), b.begin(), b.end());
    }
  }
  return blocks;
}

void handTo(Context& ctx, int peer, const void* data, size_t bytes, const char* phase) {
  ctx.setUnit(phase, 0, peer, -1);
  ctx.link(peer).postSend(data, bytes);
}

void takeFrom(Context& ctx, int peer, void* data, size_t bytes, const char* phase) {
  ctx.setStep(phase, 0, 1);
  ctx.setUnit(phase, 0, peer, -1);
  Link& l = ctx.link(peer);
  ctx.waitRecv(l, l.postRecv(data, bytes));
}

}  // namespace pycollect
