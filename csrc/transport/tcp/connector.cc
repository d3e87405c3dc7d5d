// The connecting half of the mesh: this rank dials every higher rank and runs the
// connecting side of the handshake (handshake.h).
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "common/hmac.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/mesh.h"

namespace pycollect {
namespace tcp {
namespace {

// Greets `peer` on connected socket `s`: our Hello (and nonce), its answer (and its
// nonce and proof), then our proof. Returns "" once `peer` is authenticated, else
// what went wrong; throws Error when the secrets do not match, which no retry mends.
std::string greet(Socket& s, int peer, const MeshOptions& opts, Clock::time_point deadline) {
  const bool withSecret = !opts.secret.empty();
  uint8_t out[sizeof(Hello) + kNonceBytes];
  Hello mine = makeHello(opts.token, opts.rank, peer, withSecret);
  Nonce myNonce{};
  if (withSecret) randomBytes(myNonce.data(), kNonceBytes);
  std::memcpy(out, &mine, sizeof(mine));
  std::memcpy(out + sizeof(mine), myNonce.data(), kNonceBytes);
  std::string problem = transferAll(s, out, sizeof(Hello) + (withSecret ? kNonceBytes : 0), true,
                                    deadline, opts);
  Hello theirs;
  if (problem.empty()) problem = transferAll(s, &theirs, sizeof(theirs), false, deadline, opts);
  if (!problem.empty()) return problem;
  // The answer must come from `peer`, addressed to us.
  Verdict v = checkHello(theirs, opts.token, opts.rank, opts.size);
  if (!v.ok()) return v.why;
  if (theirs.from != peer) return "answered as rank " + std::to_string(theirs.from);
  if (((theirs.flags & kFlagSecret) != 0) != withSecret) {
    throw Error(authFailedMessage(opts.rank, peer) + " (this rank has " +
                (withSecret ? "one, rank " + std::to_string(peer) + " has none)"
                            : "none, rank " + std::to_string(peer) + " has one)"));
  }
  if (!withSecret) return "";
  struct {
    Nonce nonce;
    Proof proof;
  } answer;
  problem = transferAll(s, &answer, sizeof(answer), false, deadline, opts);
  if (!problem.empty()) return problem;
  Proof expected = proveSecret(opts.secret, Side::kAccepting, opts.token, opts.rank, peer,
                               myNonce, answer.nonce);
  if (!equalConstantTime(expected.data(), answer.proof.data(), expected.size())) {
    throw Error(authFailedMessage(opts.rank, peer));
  }
  Proof proof = proveSecret(opts.secret, Side::kConnecting, opts.token, opts.rank, peer, myNonce,
                            answer.nonce);
  return transferAll(s, proof.data(), proof.size(), true, deadline, opts);
}

}  // namespace

std::unique_ptr<Link> connectTo(int peer, const Address& addr, const MeshOptions& opts,
                                Clock::time_point deadline) {
  std::string last = "no attempt";
  while (Clock::now() < deadline) {
    if (opts.cancelled()) throwCancelled(opts);
    Socket s = Socket::create(addr.family());
    configure(s, opts);
    int rc = ::connect(s.fd(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.length);
    if (rc < 0 && errno != EINPROGRESS) {
      last = syscallMessage("connect", errno, "to " + addr.str());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (pollOne(s.fd(), POLLOUT, deadline, opts) <= 0) {
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
    std::string problem = greet(s, peer, opts, deadline);
    if (problem.empty()) return std::make_unique<Link>(std::move(s), peer, opts.linkTimeoutSec);
    throw PeerLostError("rank " + std::to_string(opts.rank) + ": handshake with rank " +
                        std::to_string(peer) + " at " + addr.str() + " failed: " + problem);
  }
  if (opts.cancelled()) throwCancelled(opts);
  throw TimeoutError("rank " + std::to_string(opts.rank) + ": could not connect to rank " +
                     std::to_string(peer) + " at " + addr.str() + " within " +
                     std::to_string(opts.timeoutSec) + " s: " + last);
}

}  // namespace tcp
}  // namespace pycollect
