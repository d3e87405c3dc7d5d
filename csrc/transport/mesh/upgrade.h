// Chooses, per link, between TCP and shared memory, right after its TCP connection
// is made and authenticated (so only a peer that passed the handshake ever learns a
// segment's name). Both ends run it on the new connection at once: the rank that
// dialed, and the peer's acceptor thread (maker.h).
//
//   each end -> the other:     Intro{mode, pid, bell, probe, host identity}
//   lower rank -> higher rank: Offer{segment name, "I can read you"}   (same host only)
//   higher rank -> lower rank: Reply{opened, "I can read you"}
//
// The host identity is the boot id, the IPC namespace and PYCOLLECT_HOST_TAG: ranks
// share memory only where all agree and neither asked for tcp. Each end sends before
// it receives and the records are tiny, so the kernel's socket buffers absorb them.
// Both ends decide from the same two Intros, so they agree; a rank that asked for shm
// where it cannot be had fails with a sentence saying why, on both ends.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "transport/shm/segment.h"
#include "transport/tcp/link.h"
#include "transport/tcp/mesh.h"
#include "transport/transport.h"

namespace pycollect {
namespace mesh {

// What a same-host link needs to become a shared-memory one.
struct Upgrade {
  bool chosen = false;
  bool forced = false;  // either end asked for PYCOLLECT_TRANSPORT=shm
  shm::Segment segment;
  int side = 0;         // 0: this rank is the lower one
  pid_t peerPid = 0;
  int peerBell = -1;        // the peer's wake-up (shm/bell.h): its descriptor in its process
  bool singleCopy = false;  // the peer can read our memory
};

// This host's identity: "<boot id>/<ipc namespace>/<tag>", or "" if unknown.
std::string hostIdentity(const std::string& tag);

// What this rank brings to every link's choice, the same for all of them.
struct Local {
  TransportKind mode = TransportKind::kAuto;
  std::string host;  // hostIdentity(PYCOLLECT_HOST_TAG)
  int bell = -1;     // this rank's wake-up descriptor (shm/bell.h), which same-host peers borrow
};
Local localSide(TransportKind mode, const std::string& hostTag, int bell);

// The choice for the new link `link` (to link.peer()). Throws InvalidArgument for a
// PYCOLLECT_TRANSPORT=shm that cannot be honoured, and PeerLostError when the peer
// does not answer by `deadline`.
Upgrade negotiate(tcp::Link& link, const Local& local, const tcp::MeshOptions& opts, Clock::time_point deadline);

}  // namespace mesh
}  // namespace pycollect
