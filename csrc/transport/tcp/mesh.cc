#include "transport/tcp/mesh.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>

#include "common/error.h"

namespace pycollect {
namespace tcp {
namespace {
constexpr int kPollSliceMs = 200;  // how soon a wait notices MeshOptions::cancel
}

int msUntil(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

int pollOne(int fd, short events, Clock::time_point deadline, const MeshOptions& opts) {
  for (;;) {
    int ms = msUntil(deadline);
    if (ms == 0 || opts.cancelled()) return 0;
    struct pollfd pfd {fd, events, 0};
    int rc = ::poll(&pfd, 1, std::min(ms, kPollSliceMs));
    if (rc != 0 && !(rc < 0 && errno == EINTR)) return rc;
  }
}

void throwCancelled(const MeshOptions& opts) {
  throw PeerLostError("rank " + std::to_string(opts.rank) +
                      ": stopped connecting the group: another rank failed to connect, or the group is failing or closing");
}

std::string transferAll(Socket& s, void* buf, size_t n, bool sending, Clock::time_point deadline,
                        const MeshOptions& opts) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    IoResult r = sending ? s.sendSome(p, n) : s.recvSome(p, n);
    if (r.eof) return "connection closed during handshake";
    if (r.err == 0) {
      p += r.bytes;
      n -= r.bytes;
      continue;
    }
    if (r.err != EAGAIN) return syscallMessage(sending ? "send" : "recv", r.err, "in handshake");
    int rc = pollOne(s.fd(), sending ? POLLOUT : POLLIN, deadline, opts);
    if (opts.cancelled()) throwCancelled(opts);
    if (rc == 0) return "handshake timed out";
    if (rc < 0) return syscallMessage("poll", errno, "in handshake");
  }
  return "";
}

void configure(Socket& s, const MeshOptions& opts) {
  s.setNonBlocking();
  s.setNoDelay();
  s.setBuffers(opts.socketBuffer);
  s.setLinkTimeout(opts.linkTimeoutSec);
}

}  // namespace tcp
}  // namespace pycollect
