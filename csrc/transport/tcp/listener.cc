#include "transport/tcp/listener.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>

#include "common/error.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/mesh.h"

namespace pycollect {
namespace tcp {
namespace {

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

}  // namespace tcp
}  // namespace pycollect
