// Builds the full mesh of links for one group: every rank listens on a port the
// kernel picks, publishes it (the Python layer does that through the store), then
// connects to every higher rank (connector.cc) and accepts every lower one
// (listener.cc), checking the Hello on both sides.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "transport/tcp/link.h"
#include "transport/transport.h"
#include "transport/tcp/address.h"
#include "transport/tcp/socket.h"

namespace pycollect {
namespace tcp {

struct MeshOptions {
  int rank = 0;
  int size = 1;
  uint64_t token = 0;
  double timeoutSec = 300.0;
  int socketBuffer = 0;  // SO_SNDBUF/SO_RCVBUF, 0 for the kernel's autotuning
  std::string secret;    // empty: no challenge-response (handshake.h)
  double linkTimeoutSec = 60.0;  // keepalive of every link (Socket::setLinkTimeout)
  // Set from another thread to make connectMesh give up soon (Transport::cancelConnect).
  const std::atomic<bool>* cancel = nullptr;
  // connectMesh's own: set when one of its halves (dialing, accepting) failed, to stop the other.
  const std::atomic<bool>* halfFailed = nullptr;
  bool cancelled() const {
    return (cancel != nullptr && cancel->load()) || (halfFailed != nullptr && halfFailed->load());
  }
};

class Listener;

// Returns links indexed by peer rank (nullptr at `opts.rank`). `peers[i]` is where
// rank i listens. Throws TimeoutError/PeerLostError naming the rank that could not
// be reached.
std::vector<std::unique_ptr<Link>> connectMesh(Listener& listener,
                                               const std::vector<Endpoint>& peers,
                                               const MeshOptions& opts);

// The connecting half (connector.cc): connects to rank `peer` and exchanges Hellos.
// Retries refused connections until the deadline (the peer may still be starting).
std::unique_ptr<Link> connectTo(int peer, const Address& addr, const MeshOptions& opts,
                                Clock::time_point deadline);

// The accepting half (listener.cc): fills links[r] for every r < opts.rank.
void acceptLower(Listener& listener, std::vector<std::unique_ptr<Link>>& links,
                 const MeshOptions& opts, Clock::time_point deadline);

// Shared by both halves (mesh.cc).
int msUntil(Clock::time_point deadline);
// Polls one socket for `events` until `deadline` or a cancel, in slices short enough
// to notice the cancel; returns poll's result (0: deadline passed or cancelled).
int pollOne(int fd, short events, Clock::time_point deadline, const MeshOptions& opts);
// Moves exactly n bytes on a non-blocking socket, waiting with poll up to `deadline`.
// Returns "" on success, else what went wrong.
std::string transferAll(Socket& s, void* buf, size_t n, bool sending, Clock::time_point deadline,
                        const MeshOptions& opts);
// What a rank raises when another thread cancelled connectMesh.
[[noreturn]] void throwCancelled(const MeshOptions& opts);
// Non-blocking, TCP_NODELAY, the configured buffer sizes and the link timeout.
void configure(Socket& s, const MeshOptions& opts);

}  // namespace tcp
}  // namespace pycollect
