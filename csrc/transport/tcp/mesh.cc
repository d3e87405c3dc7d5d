#include "transport/tcp/mesh.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <exception>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "transport/tcp/listener.h"

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
                      ": stopped connecting the group: another rank failed to connect");
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

std::vector<std::unique_ptr<Link>> connectMesh(Listener& listener,
                                               const std::vector<Endpoint>& peers,
                                               const MeshOptions& opts) {
  if (static_cast<int>(peers.size()) != opts.size) {
    throw InvalidArgument("connectMesh: need one address per rank");
  }
  auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opts.timeoutSec * 1000));
  std::vector<std::unique_ptr<Link>> links(opts.size);
  // Each rank dials the higher ranks on this thread while another accepts the lower ones,
  // so it answers its lower ranks' greetings while it is still dialing. (Dialing first and
  // accepting after chained the handshakes: rank r answered rank r-1 only once every rank
  // above r had answered r, about n^2/2 greetings one after another: docs/formation.md.)
  // The halves write disjoint entries of `links` (higher ranks here, lower ones there); the
  // first to fail stops the other, and its error is the one raised.
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::exception_ptr firstError;  // the half that failed first says why; the other only stopped
  auto fail = [&] {
    std::lock_guard<std::mutex> lock(mu);
    if (!firstError) firstError = std::current_exception();
    failed.store(true);
  };
  MeshOptions mine = opts;
  mine.halfFailed = &failed;
  std::thread acceptor([&] {
    try {
      acceptLower(listener, links, mine, deadline);
    } catch (...) {
      fail();
    }
  });
  try {
    for (int peer = opts.rank + 1; peer < opts.size && !failed.load(); ++peer) {
      links[peer] = connectTo(peer, Address::resolve(peers[peer].host, peers[peer].port), mine, deadline);
    }
  } catch (...) {
    fail();
  }
  acceptor.join();
  if (firstError) std::rethrow_exception(firstError);
  return links;
}

}  // namespace tcp
}  // namespace pycollect
