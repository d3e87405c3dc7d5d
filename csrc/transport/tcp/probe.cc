#include "transport/tcp/probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include "common/error.h"

namespace pycollect {
namespace tcp {
namespace {

void exact(int fd, char* buf, size_t n, bool send, bool busyPoll) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = send ? ::send(fd, buf + done, n - done, MSG_NOSIGNAL)
                     : ::recv(fd, buf + done, n - done, busyPoll ? MSG_DONTWAIT : 0);
    if (r > 0) {
      done += static_cast<size_t>(r);
    } else if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
      continue;
    } else {
      throw Error(syscallMessage(send ? "send" : "recv", r == 0 ? ECONNRESET : errno, "in the ping-pong probe"));
    }
  }
}

// A connected pair of loopback TCP sockets.
std::pair<int, int> loopbackPair() {
  int lst = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (lst < 0 || ::bind(lst, reinterpret_cast<sockaddr*>(&a), len) < 0 || ::listen(lst, 1) < 0 ||
      ::getsockname(lst, reinterpret_cast<sockaddr*>(&a), &len) < 0) {
    throw Error(syscallMessage("bind/listen", errno, "in the ping-pong probe"));
  }
  int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c < 0 || ::connect(c, reinterpret_cast<sockaddr*>(&a), len) < 0) {
    throw Error(syscallMessage("connect", errno, "in the ping-pong probe"));
  }
  int s = ::accept4(lst, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(lst);
  if (s < 0) throw Error(syscallMessage("accept", errno, "in the ping-pong probe"));
  int one = 1;
  ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return {c, s};
}

}  // namespace

double pingPongRoundTripUs(int iters, bool busyPoll) {
  auto [c, s] = loopbackPair();
  const int warmup = std::max(10, iters / 10);
  std::thread echo([&, s = s] {
    char buf[8];
    try {
      for (int i = 0; i < warmup + iters; ++i) {
        exact(s, buf, sizeof(buf), false, busyPoll);
        exact(s, buf, sizeof(buf), true, busyPoll);
      }
    } catch (const Error&) {
    }
  });
  std::vector<double> us;
  char buf[8] = {0};
  for (int i = 0; i < warmup + iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    exact(c, buf, sizeof(buf), true, busyPoll);
    exact(c, buf, sizeof(buf), false, busyPoll);
    if (i >= warmup) us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  echo.join();
  ::close(c);
  ::close(s);
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

}  // namespace tcp
}  // namespace pycollect
