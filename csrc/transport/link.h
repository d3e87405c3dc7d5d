// A Link is one full-duplex byte stream to one peer, whatever carries it (a TCP
// socket, a shared-memory ring). Algorithms post sends and receives of byte
// ranges; each direction is a FIFO queue, so the bytes of consecutive posts
// follow each other in order. Posting never blocks: the link's Transport moves
// the bytes (transport.h) while the caller waits for a ticket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "trace/hooks.h"

namespace pycollect {

// What every link says when its peer closed the connection (a FIN: it exited, crashed
// or failed), whatever carries the bytes. It starts as Gloo's message for the same event
// does, which tools that tell a lost peer from other errors look for (torchft's tests do).
inline std::string closedByPeer(int peer) {
  return "Connection closed by peer rank " + std::to_string(peer) + " (it exited, crashed or failed)";
}

class Link {
 public:
  virtual ~Link() = default;

  virtual int peer() const = 0;

  // Queue a range; the returned ticket is done once sent(ticket) / received(ticket).
  // The memory must stay valid until then. Sends are counted here, for every
  // transport alike (the engine's measured communication volume), and traced here
  // when a traced call runs (trace/hooks.h), so no algorithm or transport has to.
  uint64_t postSend(const void* data, size_t bytes) {
    bytesPosted_ += bytes;
    uint64_t ticket = queueSend(data, bytes);
    if (trace::Recorder* r = trace::active()) trace::posted(*r, trace::Direction::kSend, peer(), ticket, bytes);
    return ticket;
  }
  uint64_t postRecv(void* data, size_t bytes) {
    uint64_t ticket = queueRecv(data, bytes);
    if (trace::Recorder* r = trace::active()) trace::posted(*r, trace::Direction::kRecv, peer(), ticket, bytes);
    return ticket;
  }
  // Takes back receive `ticket` of `bytes` bytes if it is the last one posted and none of
  // its bytes arrived yet (true): a reader that no longer wants the link's next bytes.
  virtual bool withdrawRecv(uint64_t ticket, size_t bytes) = 0;
  virtual bool sent(uint64_t ticket) const = 0;
  virtual bool received(uint64_t ticket) const = 0;
  virtual bool sendPending() const = 0;
  virtual bool recvPending() const = 0;

  // Forget all queued work (after a failure) and make the peer notice at once.
  virtual void abort() = 0;
  // Thread-safe: only wakes a wait on this link (used by shutdown); the queues
  // are left to the thread that drives the link.
  virtual void interrupt() = 0;
  virtual void close() = 0;

  // Bytes posted for sending on this link so far (headers included).
  uint64_t bytesPosted() const { return bytesPosted_; }

 protected:
  friend class PeerLink;  // passes its posts on to the link it stands for (peer_link.h)
  virtual uint64_t queueSend(const void* data, size_t bytes) = 0;
  virtual uint64_t queueRecv(void* data, size_t bytes) = 0;
  // A transport calls these after its counter of completed sends / receives grew to
  // `doneTotal` (tickets below it are done), for the trace's completion events.
  void sendsCompleted(uint64_t doneTotal) {
    if (trace::Recorder* r = trace::active()) trace::completed(*r, trace::Direction::kSend, peer(), doneTotal);
  }
  void recvsCompleted(uint64_t doneTotal) {
    if (trace::Recorder* r = trace::active()) trace::completed(*r, trace::Direction::kRecv, peer(), doneTotal);
  }

 private:
  uint64_t bytesPosted_ = 0;  // by the thread that drives the link
};

}  // namespace pycollect
