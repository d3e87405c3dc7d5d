// The TCP Link: one non-blocking socket and a FIFO of byte ranges per direction.
// progressSend/progressRecv move as many bytes as the socket takes right now,
// batching queued ranges into one sendmsg/recvmsg; the TCP Transport calls them.
#pragma once

#include <sys/uio.h>

#include <cstdint>

#include "common/clock.h"
#include "transport/link.h"
#include "transport/range_queue.h"
#include "transport/tcp/socket.h"

namespace pycollect {
namespace tcp {

class Link final : public pycollect::Link {
 public:
  // `linkTimeoutSec`: how long the peer's host may leave us unanswered (checkAlive);
  // `channel`: which of the pair's connections this is (transport.h).
  Link(Socket socket, int peer, int channel, double linkTimeoutSec);

  int peer() const override { return peer_; }
  int channel() const { return channel_; }
  int fd() const { return socket_.fd(); }
  // For a transport that keeps this connection beside another channel (shm/link.h).
  Socket& socket() { return socket_; }

  bool withdrawRecv(uint64_t ticket, size_t bytes) override { return recvs_.unpost(ticket, bytes); }
  bool sent(uint64_t ticket) const override { return sends_.done(ticket); }
  bool received(uint64_t ticket) const override { return recvs_.done(ticket); }
  bool sendPending() const override { return !sends_.empty(); }
  bool recvPending() const override { return !recvs_.empty(); }

  // Throw PeerLostError naming the peer if the connection failed or was closed.
  void progressSend();
  void progressRecv();
  // Worker thread, about every checkPeriod() while the link has queued work: throws
  // PeerLostError ("link to rank N timed out") once the peer's host has acknowledged
  // nothing for the link timeout while data or probes were outstanding, on two
  // checks in a row (one stale reading, e.g. the first send after a long idle time,
  // is not enough). A slow peer process does not trip it: its kernel acknowledges.
  void checkAlive(Clock::time_point now);
  double checkPeriodSec() const;

  void abort() override;
  // shutdown(2) wakes a poll() on the socket from any thread.
  void interrupt() override { socket_.shutdownBoth(); }
  void close() override;

 protected:
  uint64_t queueSend(const void* data, size_t bytes) override;
  uint64_t queueRecv(void* data, size_t bytes) override;

 private:
  [[noreturn]] void fail(const char* call, int err, bool eof) const;

  Socket socket_;
  int peer_;
  int channel_;
  double linkTimeoutSec_;
  bool suspect_ = false;  // the last check saw no acknowledgement for the timeout ...
  Clock::time_point lastCheck_{};  // ... at this time
  RangeQueue<> sends_;
  RangeQueue<> recvs_;
};

}  // namespace tcp
}  // namespace pycollect
