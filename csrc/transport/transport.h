// A Transport makes and drives the links of one group. The communicator gets one
// from makeTransport() and never learns what carries the bytes: it publishes the
// Endpoint that listen() returns, connects, and from then on moves bytes
// only through progress() and waitReady(), on its worker thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "transport/link.h"

namespace pycollect {

// What PYCOLLECT_TRANSPORT asks for. Every rank takes part in the same per-link
// choice whatever it asked for (mesh/upgrade.h), so ranks that asked differently
// still agree on every link: kTcp keeps TCP, kShm insists on shared memory with
// every peer (an error where it cannot be had), kAuto shares memory where the peer
// is on the same host and in the same IPC namespace.
enum class TransportKind : uint8_t {
  kTcp = 0,
  kShm = 1,
  kAuto = 2,
};

// A pair of ranks may hold one link per channel: independent byte streams, made when
// first used, so that bytes of one never wait behind the other's. The collectives keep
// theirs in the order every rank issues them; point-to-point messages are matched by
// source and tag (comm/p2p.h), in whatever order the program posts them.
enum class Channel : uint8_t {
  kCollectives = 0,
  kPointToPoint = 1,
};
constexpr int kChannels = 2;

// Shared memory's single-copy threshold where nothing sets it (the Python layer always
// does: pycollect/options.py default_single_copy_bytes).
constexpr size_t kDefaultShmSingleCopyBytes = 64 << 10;

struct TransportOptions {
  int rank = 0;
  int size = 1;
  double timeoutSec = 300.0;  // for connecting the mesh
  int socketBuffer = 0;       // TCP: SO_SNDBUF/SO_RCVBUF, 0 for the kernel's autotuning
  std::string secret;         // shared by every rank, never sent; empty: none (handshake)
  double linkTimeoutSec = 60.0;  // a link whose peer stops answering fails after this
  std::string hostTag;        // PYCOLLECT_HOST_TAG: part of the host identity (mesh/upgrade.h)
  // Shared memory: sends of at least this many bytes are read from the sender's memory
  // (one copy, shm/link.h); smaller ones go through the ring (two copies, pipelined).
  size_t shmSingleCopyBytes = kDefaultShmSingleCopyBytes;  // PYCOLLECT_SHM_SINGLE_COPY_BYTES
  // PYCOLLECT_LINKS=all: connect() makes every link; otherwise only the ring's, and the
  // rest when first used (mesh/transport.h). Every rank of a group must set it alike.
  bool allLinksAtStart = false;
};

// Where a rank can be reached; the Python layer publishes it in the store.
struct Endpoint {
  std::string host;
  int port = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Setup, once, in this order. listen() makes this rank reachable; connect()
  // takes every rank's Endpoint (index = rank) and the job's token, and returns
  // the links indexed by rank, nullptr at this rank. The transport owns them; a
  // link may be made later, when first used, which the caller does not see.
  // Throws TimeoutError / PeerLostError naming the rank that could not be reached.
  virtual Endpoint listen(const std::string& host) = 0;
  virtual std::vector<Link*> connect(const std::vector<Endpoint>& peers, uint64_t token) = 0;
  // After connect(): the links of another channel (connect's are kCollectives'), indexed by
  // rank, nullptr at this rank; each made when first used.
  virtual std::vector<Link*> links(Channel channel) = 0;
  // Any thread: makes a running connect() give up within a fraction of a second
  // (another rank reported that it failed to connect), throwing PeerLostError, or
  // the authentication failure it saw if there was one. After connect(): no more links
  // are made (a dial in progress gives up, peers that dial this rank are refused), as
  // the group fails or closes.
  virtual void cancelConnect() = 0;

  // Worker thread only. progress() moves whatever moves right now on every link
  // with queued work and never blocks; it throws PeerLostError naming the peer.
  virtual void progress() = 0;
  // Whether any link has queued work.
  virtual bool busy() const = 0;
  // Blocks until progress() may move bytes, wake() was called, or `until` passed.
  virtual void waitReady(Clock::time_point until) = 0;
  // Throws PeerLostError naming a peer whose link says it is gone (one look at each link
  // that could say so, never blocking): for waits that watch memory rather than a link
  // (collectives/shared_arena.h), which no link's progress would otherwise interrupt.
  virtual void checkPeers() = 0;

  // What carries the links to `peer` ("tcp", "shm"; both channels' alike); nullptr while
  // neither is made. Any thread.
  virtual const char* linkKind(int peer) const = 0;

  // Any thread: makes a blocked waitReady() return soon.
  virtual void wake() = 0;
  // Closes every link and stops accepting connections.
  virtual void close() = 0;
};

// The only place that knows the implementations (transport/factory.cc).
std::unique_ptr<Transport> makeTransport(TransportKind kind, const TransportOptions& options);

}  // namespace pycollect
