// The connecting half: this rank dials a peer it needs a link to and runs the
// connecting side of the handshake (handshake.h).
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/hmac.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/mesh.h"

namespace pycollect {
namespace tcp {
namespace {

constexpr const char* kStoodDown = "stood down";

// Greets `peer` on connected socket `s`: our Hello (and nonce), its answer (and its
// nonce and proof), then our proof. Returns "" once `peer` is authenticated, kStoodDown
// if its own dial to us is the link, else what went wrong; throws Error when the
// secrets do not match, which no retry mends.
std::string greet(Socket& s, int peer, int channel, const MeshOptions& opts, Clock::time_point deadline) {
  const bool withSecret = !opts.secret.empty();
  uint8_t out[sizeof(Hello) + kNonceBytes];
  Hello mine = makeHello(opts.token, opts.rank, peer, withSecret, channel);
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
  if (theirs.channel != static_cast<uint32_t>(channel)) return "answered for channel " + std::to_string(theirs.channel);
  if ((theirs.flags & kFlagStandDown) != 0) return kStoodDown;
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
  Proof expected = proveSecret(opts.secret, Side::kAccepting, opts.token, opts.rank, peer, channel,
                               myNonce, answer.nonce);
  if (!equalConstantTime(expected.data(), answer.proof.data(), expected.size())) {
    throw Error(authFailedMessage(opts.rank, peer));
  }
  Proof proof = proveSecret(opts.secret, Side::kConnecting, opts.token, opts.rank, peer, channel, myNonce,
                            answer.nonce);
  return transferAll(s, proof.data(), proof.size(), true, deadline, opts);
}

}  // namespace

std::unique_ptr<Link> connectTo(int peer, int channel, const Address& addr, const MeshOptions& opts,
                                Clock::time_point deadline) {
  auto lost = [&](const std::string& why) {
    return PeerLostError("rank " + std::to_string(opts.rank) + ": could not connect to rank " +
                         std::to_string(peer) + " at " + addr.str() + ": " + why);
  };
  if (opts.cancelled()) throwCancelled(opts);
  Socket s = Socket::create(addr.family());
  configure(s, opts);
  int rc = ::connect(s.fd(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.length);
  int err = rc < 0 && errno != EINPROGRESS ? errno : 0;
  if (err == 0) {
    int ready = pollOne(s.fd(), POLLOUT, deadline, opts);
    if (opts.cancelled()) throwCancelled(opts);
    if (ready == 0) {
      throw TimeoutError("rank " + std::to_string(opts.rank) + ": could not connect to rank " +
                         std::to_string(peer) + " at " + addr.str() + ": its host did not answer in time");
    }
    socklen_t len = sizeof(err);
    ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
  }
  // Every rank listens before it publishes its address, and until its group is
  // destroyed: a refusal means the peer is gone, and no retry would find it.
  if (err == ECONNREFUSED) throw lost("connection refused (it exited or destroyed the group)");
  if (err != 0) throw lost(syscallMessage("connect", err, ""));
  std::string problem = greet(s, peer, channel, opts, deadline);
  if (problem == kStoodDown) return nullptr;
  if (!problem.empty()) {
    throw PeerLostError("rank " + std::to_string(opts.rank) + ": handshake with rank " + std::to_string(peer) +
                        " at " + addr.str() + " failed: " + problem);
  }
  return std::make_unique<Link>(std::move(s), peer, channel, opts.linkTimeoutSec);
}

}  // namespace tcp
}  // namespace pycollect
