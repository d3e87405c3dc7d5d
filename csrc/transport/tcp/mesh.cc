#include "transport/tcp/mesh.h"

#include <poll.h>

#include <cerrno>

#include "common/error.h"
#include "transport/tcp/listener.h"

namespace pycollect {
namespace tcp {

int msUntil(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

std::string transferAll(Socket& s, void* buf, size_t n, bool sending, Clock::time_point deadline) {
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
    struct pollfd pfd {s.fd(), static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    int ms = msUntil(deadline);
    if (ms == 0) return "handshake timed out";
    int rc = ::poll(&pfd, 1, ms);
    if (rc < 0 && errno != EINTR) return syscallMessage("poll", errno, "in handshake");
  }
  return "";
}

void configure(Socket& s, const MeshOptions& opts) {
  s.setNonBlocking();
  s.setNoDelay();
  s.setBuffers(opts.socketBuffer);
}

std::vector<std::unique_ptr<Link>> connectMesh(Listener& listener,
                                               const std::vector<Endpoint>& peers,
                                               const MeshOptions& opts) {
  if (static_cast<int>(peers.size()) != opts.size) {
    throw InvalidArgument("connectMesh: need one address per rank");
  }
  auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opts.timeoutSec * 1000));
  std::vector<std::unique_ptr<Link>> links(opts.size);
  // Higher ranks first connect, lowest rank last accepts: rank size-1 only accepts,
  // so the chain of waits always ends and no cycle can form.
  for (int peer = opts.rank + 1; peer < opts.size; ++peer) {
    links[peer] = connectTo(peer, Address::resolve(peers[peer].host, peers[peer].port), opts, deadline);
  }
  acceptLower(listener, links, opts, deadline);
  return links;
}

}  // namespace tcp
}  // namespace pycollect
