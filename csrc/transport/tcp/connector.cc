// The connecting half of the mesh: this rank dials every higher rank.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <thread>

#include "common/error.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/mesh.h"

namespace pycollect {
namespace tcp {

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

}  // namespace tcp
}  // namespace pycollect
