// What making one group's TCP connections takes: every rank listens on a port the
// kernel picks and publishes it (the Python layer does that through the store); a rank
// that needs a link dials the peer (connector.cc) and the peer's listener greets it
// (listener.cc, incoming.h), each checking the other's Hello. Which links are made and
// when is the mesh transport's (mesh/maker.h).
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
  // Set from another thread to make a dial, or the wait for the first links, give up
  // soon (Transport::cancelConnect).
  const std::atomic<bool>* cancel = nullptr;
  bool cancelled() const { return cancel != nullptr && cancel->load(); }
};

// The connecting half (connector.cc): connects to rank `peer` for `channel` (transport.h)
// and exchanges Hellos.
// Returns nullptr when the peer stood this dial down (its own dial to us is the link,
// handshake.h). A refused connection is not retried: the peer listens from before it
// published its address until its group is destroyed, so it is gone (PeerLostError).
std::unique_ptr<Link> connectTo(int peer, int channel, const Address& addr, const MeshOptions& opts,
                                Clock::time_point deadline);

// Shared by both halves (mesh.cc).
int msUntil(Clock::time_point deadline);
// Polls one socket for `events` until `deadline` or a cancel, in slices short enough
// to notice the cancel; returns poll's result (0: deadline passed or cancelled).
int pollOne(int fd, short events, Clock::time_point deadline, const MeshOptions& opts);
// Moves exactly n bytes on a non-blocking socket, waiting with poll up to `deadline`.
// Returns "" on success, else what went wrong.
std::string transferAll(Socket& s, void* buf, size_t n, bool sending, Clock::time_point deadline,
                        const MeshOptions& opts);
// What a rank raises when another thread cancelled connecting.
[[noreturn]] void throwCancelled(const MeshOptions& opts);
// Non-blocking, TCP_NODELAY, the configured buffer sizes and the link timeout.
void configure(Socket& s, const MeshOptions& opts);

}  // namespace tcp
}  // namespace pycollect
