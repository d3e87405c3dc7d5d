// Barrier and point-to-point transfers.
//
// Barrier: every rank sends its call header to every other rank and waits for all
// of theirs; nobody leaves before everybody has arrived. One round, size-1
// messages each way.
//
// send/recv: the sender writes its header (tag in `root`) and the payload; the
// receiver checks the header against what it expects before reading the payload,
// so a count, dtype or tag mismatch is an error on the receiver, not garbage.
// A send completes when its bytes have left this process (eager, like Gloo's).
#include "collectives/collectives.h"
#include "common/error.h"

namespace pycollect {

void barrierAll(Context& ctx) {
  std::vector<int> peers;
  for (int p = 0; p < ctx.size; ++p) {
    if (p != ctx.rank) peers.push_back(p);
  }
  ctx.exchangeHeaders(peers);
  ctx.drainSends();
}

void sendTo(Context& ctx, int peer, const void* data, size_t bytes) {
  Link& l = ctx.link(peer);
  ctx.setStep("send", 0, 1);
  l.postSend(&ctx.call, sizeof(WireHeader));
  l.postSend(data, bytes);
  ctx.drainSends();
}

void recvFrom(Context& ctx, int peer, void* data, size_t bytes) {
  Link& l = ctx.link(peer);
  WireHeader h;
  ctx.setStep("recv header", 0, 1);
  ctx.waitRecv(l, l.postRecv(&h, sizeof(h)));
  const WireHeader& want = ctx.call;
  if (h.magic != want.magic || h.kind != want.kind || h.dtype != want.dtype ||
      h.count != want.count || h.root != want.root || h.seq != want.seq) {
    std::string theirs = h.magic == want.magic ? describeCall(h) + " as message #" + std::to_string(h.seq)
                                               : "unrelated bytes";
    throw MismatchError("rank " + std::to_string(ctx.rank) + " expected " + describeCall(want) +
                        " as message #" + std::to_string(want.seq) + " from rank " +
                        std::to_string(peer) + " but rank " + std::to_string(peer) + " sent " +
                        theirs);
  }
  ctx.setStep("recv payload", 0, 1);
  ctx.waitRecv(l, l.postRecv(data, bytes));
}

}  // namespace pycollect
