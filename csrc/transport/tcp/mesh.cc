#include "transport/tcp/mesh.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "transport/tcp/handshake.h"

namespace pycollect {
namespace tcp {
namespace {

using Clock = std::chrono::steady_clock;

int msUntil(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

// Moves exactly n bytes on a non-blocking socket, waiting with poll up to `deadline`.
// Returns "" on success, else what went wrong.
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

// Connects to rank `peer` and exchanges Hellos. Retries refused connections until
// the deadline (the peer may still be starting).
std::unique_ptr<Link> connectTo(int peer, const Address& addr, const MeshOptions& opts,
                                Clock::time_point deadline) {
  std::string last = "no attempt";
  while (Clock::now() < deadline) {
    Socket s = Socket::create(addr.family());
    configure(s, opts);
    int rc = ::connect(s.fd(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.length);
    if (rc < 0 && errno != EINPROGRESS) {
      last = syscallMessage("connect", errno, "to " + addr.str());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    struct pollfd pfd {s.fd(), POLLOUT, 0};
    if (::poll(&pfd, 1, msUntil(deadline)) <= 0) {
      last = "connect to " + addr.str() + " timed out";
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      last = syscallMessage("connect", err, "to " + addr.str());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    Hello mine;
    mine.token = opts.token;
    mine.from = opts.rank;
    mine.to = peer;
    std::string problem = transferAll(s, &mine, sizeof(mine), true, deadline);
    Hello theirs;
    if (problem.empty()) problem = transferAll(s, &theirs, sizeof(theirs), false, deadline);
    if (problem.empty()) {
      // The answer must come from `peer`, addressed to us.
      problem = checkHello(theirs, opts.token, opts.rank, opts.size);
      if (problem.empty() && theirs.from != peer) {
        problem = "answered as rank " + std::to_string(theirs.from);
      }
    }
    if (problem.empty()) return std::make_unique<Link>(std::move(s), peer);
    throw PeerLostError("rank " + std::to_string(opts.rank) + ": handshake with rank " +
                        std::to_string(peer) + " at " + addr.str() + " failed: " + problem);
  }
  throw TimeoutError("rank " + std::to_string(opts.rank) + ": could not connect to rank " +
                     std::to_string(peer) + " at " + addr.str() + " within " +
                     std::to_string(opts.timeoutSec) + " s: " + last);
}

struct Pending {
  Socket socket;
  Address from;
  Hello hello;
  size_t got = 0;
  Clock::time_point deadline;
};

void refuse(const MeshOptions& opts, const Pending& p, const std::string& why) {
  std::fprintf(stderr, "pycollect: rank %d refused a connection from %s: %s\n", opts.rank,
               p.from.str().c_str(), why.c_str());
}

// Accepts connections until every lower rank has greeted us correctly. Strangers
// are refused without disturbing the real peers: each pending connection is read
// concurrently and dropped after a short grace period if it never says Hello.
void acceptLower(Listener& listener, std::vector<std::unique_ptr<Link>>& links,
                 const MeshOptions& opts, Clock::time_point deadline) {
  int missing = opts.rank;
  std::vector<Pending> pending;
  listener.socket().setNonBlocking();
  while (missing > 0) {
    std::vector<pollfd> fds;
    fds.push_back({listener.socket().fd(), POLLIN, 0});
    for (auto& p : pending) fds.push_back({p.socket.fd(), POLLIN, 0});
    int ms = msUntil(deadline);
    if (ms == 0) {
      std::string who;
      for (int r = 0; r < opts.rank; ++r) {
        if (!links[r]) who += (who.empty() ? "" : ", ") + std::to_string(r);
      }
      throw TimeoutError("rank " + std::to_string(opts.rank) + ": rank(s) " + who +
                         " did not connect within " + std::to_string(opts.timeoutSec) + " s");
    }
    if (::poll(fds.data(), fds.size(), std::min(ms, 200)) < 0 && errno != EINTR) {
      throw Error(syscallMessage("poll", errno, "while accepting peers"));
    }
    if (fds[0].revents & POLLIN) {
      for (;;) {
        sockaddr_storage ss{};
        socklen_t len = sizeof(ss);
        int fd = ::accept4(listener.socket().fd(), reinterpret_cast<sockaddr*>(&ss), &len,
                           SOCK_CLOEXEC);
        if (fd < 0) break;
        Pending p;
        p.socket = Socket(fd);
        configure(p.socket, opts);
        p.from = Address::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
        p.deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
        pending.push_back(std::move(p));
      }
    }
    auto now = Clock::now();
    for (size_t i = 0; i < pending.size();) {
      Pending& p = pending[i];
      std::string problem;
      bool done = false;
      IoResult r = p.socket.recvSome(reinterpret_cast<char*>(&p.hello) + p.got,
                                     sizeof(Hello) - p.got);
      if (r.eof) {
        problem = "closed before completing the handshake";
      } else if (r.err != 0 && r.err != EAGAIN) {
        problem = syscallMessage("recv", r.err, "in handshake");
      } else {
        p.got += r.bytes;
        if (p.got == sizeof(Hello)) {
          problem = checkHello(p.hello, opts.token, opts.rank, opts.size);
          if (problem.empty() && p.hello.from > opts.rank) {
            problem = "rank " + std::to_string(p.hello.from) + " should be accepting, not connecting";
          }
          if (problem.empty() && links[p.hello.from]) {
            problem = "rank " + std::to_string(p.hello.from) + " is already connected";
          }
          done = problem.empty();
        } else if (now >= p.deadline) {
          problem = "no complete greeting within the grace period";
        }
      }
      if (!done && problem.empty()) {
        ++i;
        continue;
      }
      if (done) {
        Hello ack;
        ack.token = opts.token;
        ack.from = opts.rank;
        ack.to = p.hello.from;
        std::string err = transferAll(p.socket, &ack, sizeof(ack), true, deadline);
        if (err.empty()) {
          links[p.hello.from] = std::make_unique<Link>(std::move(p.socket), p.hello.from);
          --missing;
        } else {
          refuse(opts, p, err);
        }
      } else {
        refuse(opts, p, problem);
      }
      pending.erase(pending.begin() + i);
    }
  }
}

}  // namespace

Listener::Listener(const std::string& host) {
  Address want = Address::resolve(host, 0);
  socket_ = Socket::create(want.family());
  int one = 1;
  ::setsockopt(socket_.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(socket_.fd(), reinterpret_cast<const sockaddr*>(&want.storage), want.length) < 0) {
    throw Error(syscallMessage("bind", errno, "to " + want.str()));
  }
  if (::listen(socket_.fd(), 1024) < 0) throw Error(syscallMessage("listen", errno, ""));
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(socket_.fd(), reinterpret_cast<sockaddr*>(&ss), &len);
  address_ = Address::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
}

std::vector<std::unique_ptr<Link>> connectMesh(Listener& listener,
                                               const std::vector<std::string>& hosts,
                                               const std::vector<int>& ports,
                                               const MeshOptions& opts) {
  if (static_cast<int>(hosts.size()) != opts.size || static_cast<int>(ports.size()) != opts.size) {
    throw InvalidArgument("connectMesh: need one address per rank");
  }
  auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opts.timeoutSec * 1000));
  std::vector<std::unique_ptr<Link>> links(opts.size);
  // Higher ranks first connect, lowest rank last accepts: rank size-1 only accepts,
  // so the chain of waits always ends and no cycle can form.
  for (int peer = opts.rank + 1; peer < opts.size; ++peer) {
    links[peer] = connectTo(peer, Address::resolve(hosts[peer], ports[peer]), opts, deadline);
  }
  acceptLower(listener, links, opts, deadline);
  return links;
}

}  // namespace tcp
}  // namespace pycollect
