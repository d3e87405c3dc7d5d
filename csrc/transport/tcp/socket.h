// A move-only owner of one TCP socket descriptor. Every raw send/recv/accept of
// the engine goes through here, so the EINTR retry lives in exactly one place.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <string>

#include "common/fork.h"

namespace pycollect {
namespace tcp {

// Result of one non-blocking I/O attempt.
struct IoResult {
  ssize_t bytes = 0;  // bytes moved (>= 0) when err == 0
  int err = 0;        // 0, EAGAIN for "would block", or the errno of the failure
  bool eof = false;   // recv saw an orderly shutdown by the peer
};

class Socket {
 public:
  Socket() = default;
  // Takes ownership of `fd` (tracked, so a forked child closes its copy at once).
  explicit Socket(int fd);
  ~Socket();
  Socket(Socket&& other) noexcept : owner_(other.owner_), fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Creates a TCP socket of the given family (AF_INET / AF_INET6); throws on failure.
  static Socket create(int family);

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing (a moved-from socket).
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

  void setNonBlocking();
  void setNoDelay();
  // Sets SO_SNDBUF and SO_RCVBUF; 0 leaves the kernel's autotuning alone.
  void setBuffers(int bytes);
  // Keepalive, so that an idle link whose peer host stopped answering (no FIN: a
  // cut cable, a partition, a host that is down) fails in about `seconds`: probes
  // every max(1, seconds/3) s after as long an idle time, 3 unanswered ones end the
  // connection. A live peer's kernel answers them however long its process computes.
  // (No TCP_USER_TIMEOUT: Linux also applies it to a zero window, so it would fail
  // a live peer that is slow to read; links with work in flight are watched by
  // Link::checkAlive instead.) Throws Error naming the option if one is refused.
  void setLinkTimeout(double seconds);
  // From TCP_INFO: whether sent bytes or probes await the peer's acknowledgement,
  // and how long ago the last acknowledgement of any kind arrived.
  struct AckState {
    bool awaiting = false;
    uint32_t msSinceAck = 0;
  };
  AckState ackState() const;
  // Wakes any thread polling this socket (used to abort a running collective).
  // Both do nothing in a forked child: its copy is already closed, and shutting
  // down the shared connection would break the parent's group.
  void shutdownBoth();
  void close();

  IoResult sendv(const struct iovec* iov, int n);
  IoResult recvv(const struct iovec* iov, int n);
  IoResult sendSome(const void* p, size_t n);
  IoResult recvSome(void* p, size_t n);

 private:
  fork::Owner owner_;
  int fd_ = -1;
};

}  // namespace tcp
}  // namespace pycollect
