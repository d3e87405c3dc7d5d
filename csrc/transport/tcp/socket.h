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
