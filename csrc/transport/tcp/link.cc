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

Link::Link(Socket socket, int peer, double linkTimeoutSec)
    : socket_(std::move(socket)), peer_(peer), linkTimeoutSec_(linkTimeoutSec) {}

uint64_t Link::queueSend(const void* data, size_t bytes) {
  sends_.push_back({static_cast<char*>(const_cast<void*>(data)), bytes});
  return sendsPosted_++;
}

uint64_t Link::queueRecv(void* data, size_t bytes) {
  recvs_.push_back({static_cast<char*>(data), bytes});
  return recvsPosted_++;
}

int Link::fillIov(std::deque<Range>& q, struct iovec* iov, int max) {
  int n = 0;
  for (auto it = q.begin(); it != q.end() && n < max; ++it) {
    if (it->left == 0) continue;
    iov[n].iov_base = it->data;
    iov[n].iov_len = it->left;
    ++n;
  }
  return n;
}

// Retires `bytes` from the front of q; returns how many ranges completed.
uint64_t Link::consume(std::deque<Range>& q, size_t bytes) {
  uint64_t done = 0;
  while (!q.empty()) {
    Range& r = q.front();
    size_t take = bytes < r.left ? bytes : r.left;
    r.data += take;
    r.left -= take;
    bytes -= take;
    if (r.left != 0) break;
    q.pop_front();
    ++done;
  }
  return done;
}

void Link::progressSend() {
  struct iovec iov[kMaxIov];
  while (!sends_.empty()) {
    int n = fillIov(sends_, iov, kMaxIov);
    if (n == 0) {  // only empty ranges are queued
      sendsDone_ += consume(sends_, 0);
      sendsCompleted(sendsDone_);
      return;
    }
    IoResult r = socket_.sendv(iov, n);
    if (r.err == EAGAIN) return;
    if (r.err != 0) fail("send", r.err, false);
    if (uint64_t done = consume(sends_, r.bytes)) {
      sendsDone_ += done;
      sendsCompleted(sendsDone_);
    }
  }
}

void Link::progressRecv() {
  struct iovec iov[kMaxIov];
  while (!recvs_.empty()) {
    int n = fillIov(recvs_, iov, kMaxIov);
    if (n == 0) {
      recvsDone_ += consume(recvs_, 0);
      recvsCompleted(recvsDone_);
      return;
    }
    IoResult r = socket_.recvv(iov, n);
    if (r.eof) fail("recv", 0, true);
    if (r.err == EAGAIN) return;
    if (r.err != 0) fail("recv", r.err, false);
    if (uint64_t done = consume(recvs_, r.bytes)) {
      recvsDone_ += done;
      recvsCompleted(recvsDone_);
    }
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
    throw PeerLostError("connection to rank " + std::to_string(peer_) +
                        " was closed by the peer (it exited, crashed or failed)");
  }
  throw PeerLostError("connection to rank " + std::to_string(peer_) + " lost: " +
                      syscallMessage(call, err, ""));
}

void Link::abort() {
  sends_.clear();
  recvs_.clear();
  sendsDone_ = sendsPosted_;
  recvsDone_ = recvsPosted_;
  socket_.shutdownBoth();
}

void Link::close() { socket_.close(); }

}  // namespace tcp
}  // namespace pycollect
