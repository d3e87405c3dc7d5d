// A Link is one full-duplex byte stream to one peer. Algorithms post sends and
// receives of byte ranges; each direction is a FIFO queue, so the bytes of
// consecutive posts follow each other on the wire in order. Posting never blocks:
// the Poller moves the bytes while the caller waits for a ticket.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <string>

#include "transport/tcp/socket.h"

namespace pycollect {

class Link {
 public:
  Link(tcp::Socket socket, int peer);

  int peer() const { return peer_; }
  int fd() const { return socket_.fd(); }

  // Queue a range; the returned ticket is done once sent(ticket) / received(ticket).
  // The memory must stay valid until then.
  uint64_t postSend(const void* data, size_t bytes);
  uint64_t postRecv(void* data, size_t bytes);
  bool sent(uint64_t ticket) const { return sendsDone_ > ticket; }
  bool received(uint64_t ticket) const { return recvsDone_ > ticket; }
  bool sendPending() const { return !sends_.empty(); }
  bool recvPending() const { return !recvs_.empty(); }

  // Move as many bytes as the socket takes right now; throw PeerLostError naming
  // the peer if the connection failed or was closed.
  void progressSend();
  void progressRecv();

  // Forget all queued work (after a failure) and wake anyone polling the socket.
  void abort();
  // Thread-safe: only wakes a poll() on the socket (shutdown(2)); used by shutdown.
  void interrupt() { socket_.shutdownBoth(); }
  void close();

 private:
  struct Range {
    char* data;
    size_t left;
  };
  [[noreturn]] void fail(const char* call, int err, bool eof) const;
  static int fillIov(std::deque<Range>& q, struct iovec* iov, int max);
  static uint64_t consume(std::deque<Range>& q, size_t bytes);

  tcp::Socket socket_;
  int peer_;
  std::deque<Range> sends_;
  std::deque<Range> recvs_;
  uint64_t sendsPosted_ = 0, sendsDone_ = 0;
  uint64_t recvsPosted_ = 0, recvsDone_ = 0;
};

}  // namespace pycollect
