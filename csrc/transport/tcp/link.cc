#include "transport/tcp/link.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "common/error.h"

namespace pycollect {
namespace tcp {
namespace {
constexpr int kMaxIov = 16;  // ranges batched into one sendmsg/recvmsg
}

Link::Link(Socket socket, int peer, int channel, double linkTimeoutSec)
    : socket_(std::move(socket)), peer_(peer), channel_(channel), linkTimeoutSec_(linkTimeoutSec) {}

uint64_t Link::queueSend(const void* data, size_t bytes) {
  return sends_.post({static_cast<char*>(const_cast<void*>(data)), bytes});
}

uint64_t Link::queueRecv(void* data, size_t bytes) { return recvs_.post({static_cast<char*>(data), bytes}); }

void Link::progressSend() {
  struct iovec iov[kMaxIov];
  while (!sends_.empty()) {
    int n = sends_.gather(iov, kMaxIov);
    if (n == 0) {  // only empty ranges are queued
      sends_.advance(0);
      sendsCompleted(sends_.doneCount());
      return;
    }
    IoResult r = socket_.sendv(iov, n);
    if (r.err == EAGAIN) return;
    if (r.err != 0) fail("send", r.err, false);
    if (sends_.advance(r.bytes)) sendsCompleted(sends_.doneCount());
  }
}

void Link::progressRecv() {
  struct iovec iov[kMaxIov];
  while (!recvs_.empty()) {
    int n = recvs_.gather(iov, kMaxIov);
    if (n == 0) {
      recvs_.advance(0);
      recvsCompleted(recvs_.doneCount());
      return;
    }
    IoResult r = socket_.recvv(iov, n);
    if (r.eof) fail("recv", 0, true);
    if (r.err == EAGAIN) return;
    if (r.err != 0) fail("recv", r.err, false);
    if (recvs_.advance(r.bytes)) recvsCompleted(recvs_.doneCount());
  }
}

double Link::checkPeriodSec() const { return std::min(1.0, std::max(0.05, linkTimeoutSec_ / 10)); }

void Link::checkAlive(Clock::time_point now) {
  Socket::AckState s = socket_.ackState();
  bool silent = s.awaiting && s.msSinceAck >= linkTimeoutSec_ * 1000;
  // The previous check counts only if it was the one just before (the link may
  // have been idle, and unchecked, since).
  bool inARow = now - lastCheck_ < std::chrono::duration<double>(3 * checkPeriodSec());
  if (silent && suspect_ && inARow) fail("tcp_info", ETIMEDOUT, false);
  suspect_ = silent;
  lastCheck_ = now;
}

void Link::fail(const char* call, int err, bool eof) const {
  if (err == ETIMEDOUT) {
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%g", linkTimeoutSec_);
    throw PeerLostError("link to rank " + std::to_string(peer_) + " timed out: its host answered " +
                        "nothing for " + seconds + " s (PYCOLLECT_LINK_TIMEOUT; a cut link, a " +
                        "partition or a host that is down): " + syscallMessage(call, err, ""));
  }
  if (eof) {
    throw PeerLostError(closedByPeer(peer_));
  }
  throw PeerLostError("connection to rank " + std::to_string(peer_) + " lost: " +
                      syscallMessage(call, err, ""));
}

void Link::abort() {
  sends_.abandon();
  recvs_.abandon();
  socket_.shutdownBoth();
}

void Link::close() { socket_.close(); }

}  // namespace tcp
}  // namespace pycollect
