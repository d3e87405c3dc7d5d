// Receive from any source: the first sender wins, as in Gloo.
//
// The receiver cannot know which link its message will come on, and each link is a
// FIFO stream, so it looks at the next header of every link: it prefetches a header
// receive on each (HeaderInbox, inbox.h) and waits until one of them is a send with
// its tag. That sender wins; its header is checked (dtype, count, message number, as
// a named recv would) and the payload is received. Headers prefetched on the other
// links stay in the inbox for whatever reads those links next, so nothing is lost or
// reordered.
//
// Ordering: messages from one sender arrive in the order sent; among senders whose
// messages have both arrived when the receiver looks, the lowest rank wins. While it
// waits, this rank's later operations wait behind it (the receive runs on the
// worker like a collective), but transfers already posted keep moving.
//
// Example with 3 ranks: rank 0 receives from any; ranks 2 and 1 send to it, rank 2's
// header arrives first: rank 0 receives rank 2's payload and returns 2; rank 1's
// header waits in the inbox for rank 0's next receive from rank 1 (or from any).
#include "collectives/collectives.h"
#include "common/error.h"

namespace pycollect {

int recvAny(Context& ctx, void* data, size_t count, DType dtype, int tag,
            std::vector<uint64_t>& recvSeq) {
  HeaderInbox& inbox = ctx.inbox();
  std::vector<int> peers;
  for (int p = 0; p < ctx.size; ++p) {
    if (p != ctx.rank) peers.push_back(p);
  }
  if (peers.empty()) throw InvalidArgument("recv from any source: the group has no other rank");
  for (int p : peers) inbox.prefetch(ctx.link(p));
  int from = -1;
  auto arrived = [&] {
    for (int p : peers) {
      const WireHeader* h = inbox.arrived(ctx.link(p));
      if (h != nullptr && h->magic == ctx.call.magic &&
          h->kind == static_cast<uint8_t>(OpKind::kSend) && h->root == tag) {
        from = p;
        return true;
      }
    }
    return false;
  };
  ctx.setStep("recv", 0, 1);
  std::string senders;  // a timeout names every rank it waited on
  for (int p : peers) senders += (senders.empty() ? "rank " : " or rank ") + std::to_string(p);
  ctx.waitFor(arrived, "receive a send with tag " + std::to_string(tag) + " from any source: " + senders);
  HeaderRecv r;
  inbox.receive(ctx.link(from), r);  // takes the prefetched header over
  const WireHeader& h = r.header();
  WireHeader want = ctx.call;
  want.seq = recvSeq[from];
  if (h.dtype != want.dtype || h.count != want.count || h.seq != want.seq) {
    throw MismatchError("rank " + std::to_string(ctx.rank) + " expected " + describeCall(want) +
                        " as message #" + std::to_string(want.seq) + " from any rank, but rank " +
                        std::to_string(from) + " sent " + describeCall(h) + " as message #" +
                        std::to_string(h.seq));
  }
  ++recvSeq[from];
  uint64_t ticket = ctx.link(from).postRecv(data, count * dtypeSize(dtype));
  ctx.waitRecv(ctx.link(from), ticket);
  return from;
}

}  // namespace pycollect
