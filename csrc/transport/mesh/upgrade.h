// Chooses, per link, between TCP and shared memory, right after the TCP mesh is
// connected and authenticated (so only a peer that passed the handshake ever
// learns a segment's name).
//
//   every rank -> every peer:  Intro{mode, pid, bell, probe, host identity}
//   lower rank -> higher rank: Offer{segment name, "I can read you"}   (same host only)
//   higher rank -> lower rank: Reply{opened, "I can read you"}
//
// The host identity is the boot id, the IPC namespace and PYCOLLECT_HOST_TAG: ranks
// share memory only where all agree and neither asked for tcp. Every rank sends
// before it receives and the records are tiny, so the kernel's socket buffers
// absorb them and no order of ranks can deadlock. Both ends decide from the same
// two Intros, so they agree on every link; a rank that asked for shm where it
// cannot be had fails the group with a sentence saying why, on both ends.
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

// One Upgrade per rank (index = rank; `links[self]` is nullptr). `bell`: this rank's
// wake-up descriptor (shm/bell.h), which its same-host peers borrow. Throws
// InvalidArgument for a PYCOLLECT_TRANSPORT=shm that cannot be honoured, and
// PeerLostError/TimeoutError when a peer does not answer.
std::vector<Upgrade> negotiate(const std::vector<tcp::Link*>& links, TransportKind mode,
                               const std::string& hostTag, int bell, const tcp::MeshOptions& opts,
                               Clock::time_point deadline);

}  // namespace mesh
}  // namespace pycollect
