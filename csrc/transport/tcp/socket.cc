#include "transport/tcp/socket.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/error.h"

namespace pycollect {
namespace tcp {

Socket::Socket(int fd) : fd_(fd) {
  if (fd_ >= 0) fork::track(fd_);
}

Socket::~Socket() { close(); }

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    owner_ = other.owner_;
    fd_ = other.release();
  }
  return *this;
}

Socket Socket::create(int family) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(syscallMessage("socket", errno, "creating a TCP socket"));
  return Socket(fd);
}

void Socket::setNonBlocking() {
  int flags = ::fcntl(fd_, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK) < 0) {
    throw Error(syscallMessage("fcntl", errno, "setting O_NONBLOCK"));
  }
}

void Socket::setNoDelay() {
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void Socket::setBuffers(int bytes) {
  if (bytes <= 0) return;
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

void Socket::setLinkTimeout(double seconds) {
  int on = 1;
  int probe = std::max(1, static_cast<int>(seconds / 3));
  int count = 3;
  struct {
    int level, name;
    const int* value;
    const char* what;
  } options[] = {{SOL_SOCKET, SO_KEEPALIVE, &on, "SO_KEEPALIVE"},
                 {IPPROTO_TCP, TCP_KEEPIDLE, &probe, "TCP_KEEPIDLE"},
                 {IPPROTO_TCP, TCP_KEEPINTVL, &probe, "TCP_KEEPINTVL"},
                 {IPPROTO_TCP, TCP_KEEPCNT, &count, "TCP_KEEPCNT"}};
  for (const auto& o : options) {
    if (::setsockopt(fd_, o.level, o.name, o.value, sizeof(int)) < 0) {
      throw Error(syscallMessage("setsockopt", errno, std::string("setting ") + o.what));
    }
  }
}

Socket::AckState Socket::ackState() const {
  struct tcp_info info {};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &info, &len) < 0) return {};
  return {info.tcpi_unacked > 0 || info.tcpi_probes > 0, info.tcpi_last_ack_recv};
}

void Socket::shutdownBoth() {
  if (fd_ >= 0 && owner_.here()) ::shutdown(fd_, SHUT_RDWR);
}

void Socket::close() {
  if (fd_ >= 0 && owner_.here()) {
    fork::untrack(fd_);
    ::close(fd_);
  }
  fd_ = -1;
}

IoResult Socket::sendv(const struct iovec* iov, int n) {
  struct msghdr msg {};
  msg.msg_iov = const_cast<struct iovec*>(iov);
  msg.msg_iovlen = n;
  for (;;) {
    ssize_t r = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r >= 0) return {r, 0, false};
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return {0, EAGAIN, false};
    return {0, errno, false};
  }
}

IoResult Socket::recvv(const struct iovec* iov, int n) {
  struct msghdr msg {};
  msg.msg_iov = const_cast<struct iovec*>(iov);
  msg.msg_iovlen = n;
  for (;;) {
    ssize_t r = ::recvmsg(fd_, &msg, MSG_DONTWAIT);
    if (r > 0) return {r, 0, false};
    if (r == 0) return {0, 0, true};
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return {0, EAGAIN, false};
    return {0, errno, false};
  }
}

IoResult Socket::sendSome(const void* p, size_t n) {
  struct iovec v {const_cast<void*>(p), n};
  return sendv(&v, 1);
}

IoResult Socket::recvSome(void* p, size_t n) {
  struct iovec v {p, n};
  return recvv(&v, 1);
}

}  // namespace tcp
}  // namespace pycollect
