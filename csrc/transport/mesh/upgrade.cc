#include "transport/mesh/upgrade.h"

#include <unistd.h>

#include <cstring>
#include <fstream>

#include "common/error.h"
#include "transport/shm/cma.h"
#include "transport/shm/link.h"
#include "transport/shm/ring.h"
#include "transport/tcp/socket.h"

namespace pycollect {
namespace mesh {
namespace {
using namespace shm;  // the segment, its header and the probe of the links this chooses

constexpr uint32_t kIntroMagic = 0x4d485350;  // "PSHM"

struct Intro {
  uint32_t magic = kIntroMagic;
  uint8_t mode = 0;  // TransportKind
  uint8_t reserved[3] = {};
  int32_t pid = 0;
  int32_t bell = -1;  // the sender's wake-up descriptor, in its process (shm/bell.h)
  uint64_t probeAddress = 0;
  uint64_t probeValue = 0;
  char host[96] = {};
};
struct Offer {
  char name[48] = {};
  uint8_t canRead = 0;
  uint8_t reserved[15] = {};
};
struct Reply {
  uint8_t opened = 0;
  uint8_t canRead = 0;
  uint8_t reserved[14] = {};
};

const char* modeName(uint8_t m) {
  switch (static_cast<TransportKind>(m)) {
    case TransportKind::kTcp: return "tcp";
    case TransportKind::kShm: return "shm";
    case TransportKind::kAuto: return "auto";
  }
  return "?";
}

void move(tcp::Link* l, void* buf, size_t n, bool sending, const tcp::MeshOptions& opts,
          Clock::time_point deadline) {
  std::string problem = tcp::transferAll(l->socket(), buf, n, sending, deadline, opts);
  if (problem.empty()) return;
  throw PeerLostError("rank " + std::to_string(opts.rank) + ": choosing the transport to rank " +
                      std::to_string(l->peer()) + " failed: " + problem);
}

std::string firstLine(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

}  // namespace

std::string hostIdentity(const std::string& tag) {
  std::string boot = firstLine("/proc/sys/kernel/random/boot_id");
  char ns[64] = {};
  ssize_t n = ::readlink("/proc/self/ns/ipc", ns, sizeof(ns) - 1);
  if (boot.empty() || n <= 0) return "";
  return boot + "/" + std::string(ns, static_cast<size_t>(n)) + "/" + tag;
}

Local localSide(TransportKind mode, const std::string& hostTag, int bell) {
  return {mode, hostIdentity(hostTag), bell};
}

Upgrade negotiate(tcp::Link& link, const Local& local, const tcp::MeshOptions& opts, Clock::time_point deadline) {
  const int self = opts.rank, p = link.peer();
  Intro mine, t;
  mine.mode = static_cast<uint8_t>(local.mode);
  mine.pid = static_cast<int32_t>(::getpid());
  mine.bell = local.bell;
  Probe probe = localProbe();
  mine.probeAddress = probe.address;
  mine.probeValue = probe.value;
  std::strncpy(mine.host, local.host.c_str(), sizeof(mine.host) - 1);
  move(&link, &mine, sizeof(mine), true, opts, deadline);
  move(&link, &t, sizeof(t), false, opts, deadline);
  if (t.magic != kIntroMagic) throw PeerLostError("rank " + std::to_string(p) + " sent no transport intro");

  Upgrade u;
  bool wanted = mine.mode != static_cast<uint8_t>(TransportKind::kTcp) &&
                t.mode != static_cast<uint8_t>(TransportKind::kTcp);
  bool sameHost = !local.host.empty() && std::strncmp(mine.host, t.host, sizeof(mine.host)) == 0;
  u.forced = mine.mode == static_cast<uint8_t>(TransportKind::kShm) ||
             t.mode == static_cast<uint8_t>(TransportKind::kShm);
  if (u.forced && !(wanted && sameHost)) {
    throw InvalidArgument("PYCOLLECT_TRANSPORT: rank " + std::to_string(self) + " (" + modeName(mine.mode) +
                          ") and rank " + std::to_string(p) + " (" + modeName(t.mode) + ") cannot share memory: " +
                          (wanted ? "they are on different hosts or IPC namespaces" : "one of them asked for tcp"));
  }
  u.chosen = wanted && sameHost;
  u.side = self < p ? 0 : 1;
  u.peerPid = t.pid;
  u.peerBell = t.bell;
  if (!u.chosen) return u;
  const bool iCanRead = canRead(t.pid, {t.probeAddress, t.probeValue});
  const size_t bytes = segmentBytes(kRingBytes);
  std::string failed;
  if (u.side == 0) {  // the lower rank creates and offers
    Offer o;  // an empty name says "none": the peer answers not opened
    try {
      u.segment = Segment::create(bytes, p);
      static_cast<Header*>(u.segment.data())->magic = kSegmentMagic;
      std::strncpy(o.name, u.segment.name().c_str(), sizeof(o.name) - 1);
    } catch (const Error&) {
      if (u.forced) throw;
    }
    o.canRead = iCanRead;
    move(&link, &o, sizeof(o), true, opts, deadline);
    Reply rep;
    move(&link, &rep, sizeof(rep), false, opts, deadline);
    u.segment.unlink();  // the peer has it mapped, or will never map it
    u.singleCopy = rep.canRead != 0;
    if (!rep.opened) failed = "rank " + std::to_string(p) + " could not map the segment this rank offered";
  } else {  // the higher rank opens, unlinks and answers
    Offer o;
    move(&link, &o, sizeof(o), false, opts, deadline);
    o.name[sizeof(o.name) - 1] = 0;
    Reply rep;
    failed = o.name[0] ? "" : "rank " + std::to_string(p) + " could not create a segment";
    if (failed.empty()) {
      try {
        u.segment = Segment::open(o.name, bytes, p);
        rep.opened = static_cast<Header*>(u.segment.data())->magic == kSegmentMagic;
      } catch (const Error& e) {
        failed = e.what();
      }
    }
    rep.canRead = iCanRead;
    u.singleCopy = o.canRead != 0;
    move(&link, &rep, sizeof(rep), true, opts, deadline);
    if (!rep.opened && failed.empty()) failed = "the segment rank " + std::to_string(p) + " offered is not one";
  }
  if (!failed.empty()) {
    u.chosen = false;
    u.segment = Segment();
    if (u.forced) throw InvalidArgument("PYCOLLECT_TRANSPORT=shm: rank " + std::to_string(self) + ": " + failed);
  }
  return u;
}

}  // namespace mesh
}  // namespace pycollect
