#include "comm/p2p.h"

#include "common/error.h"

namespace pycollect {

void PendingP2P::post(Link* l, HeaderInbox& inbox, Clock::time_point d) {
  link = l;
  deadline = d;
  if (isSend) {
    link->postSend(&header, sizeof(header));
    payloadTicket = link->postSend(data, bytes);
  } else {
    inbox.receive(*link, received);
    payloadTicket = link->postRecv(data, bytes);
  }
}

bool PendingP2P::poll() {
  if (!isSend && !headerChecked && link->received(received.ticket)) {
    headerChecked = true;
    const WireHeader& h = received.header();
    const WireHeader& want = header;
    if (h.magic != want.magic || h.kind != want.kind || h.dtype != want.dtype ||
        h.count != want.count || h.root != want.root || h.seq != want.seq) {
      std::string theirs = h.magic == want.magic
                               ? describeCall(h) + " as message #" + std::to_string(h.seq)
                               : "bytes that are not a send header (it is in another call)";
      throw MismatchError("rank " + std::to_string(self) + " expected " + describeCall(want) +
                          " as message #" + std::to_string(want.seq) + " from rank " +
                          std::to_string(peer) + " but rank " + std::to_string(peer) + " sent " +
                          theirs);
    }
  }
  bool done = isSend ? link->sent(payloadTicket) : (headerChecked && link->received(payloadTicket));
  if (done) return true;
  if (Clock::now() > deadline) {
    throw TimeoutError(std::string(isSend ? "send to" : "recv from") + " rank " +
                       std::to_string(peer) + " (" + describeCall(header) + ", message #" +
                       std::to_string(header.seq) + ") on rank " + std::to_string(self) +
                       " timed out waiting to " + (isSend ? "send to" : "receive from") +
                       " rank " + std::to_string(peer));
  }
  return false;
}

}  // namespace pycollect
