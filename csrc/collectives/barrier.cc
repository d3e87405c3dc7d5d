// Barrier: every rank sends its call header to every other rank and waits for all
// of theirs; nobody leaves before everybody has arrived. One round, size-1
// messages each way. (Point-to-point send/recv live in comm/p2p.h: they complete
// in the background rather than as one step of the queue.)
#include "collectives/collectives.h"

namespace pycollect {

void barrierAll(Context& ctx) {
  std::vector<int> peers;
  for (int p = 0; p < ctx.size; ++p) {
    if (p != ctx.rank) peers.push_back(p);
  }
  ctx.exchangeHeaders(peers);
  ctx.drainSends();
}

}  // namespace pycollect
