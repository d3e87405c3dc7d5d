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

std::vector<Upgrade> negotiate(const std::vector<tcp::Link*>& links, TransportKind mode,
                               const std::string& hostTag, int bell, const tcp::MeshOptions& opts,
                               Clock::time_point deadline) {
  const int self = opts.rank, size = static_cast<int>(links.size());
  Intro mine;
  mine.mode = static_cast<uint8_t>(mode);
  mine.pid = static_cast<int32_t>(::getpid());
  mine.bell = bell;
  Probe probe = localProbe();
  mine.probeAddress = probe.address;
  mine.probeValue = probe.value;
  std::string host = hostIdentity(hostTag);
  std::strncpy(mine.host, host.c_str(), sizeof(mine.host) - 1);
  std::vector<Intro> theirs(size);
  for (tcp::Link* l : links) if (l) move(l, &mine, sizeof(mine), true, opts, deadline);
  for (tcp::Link* l : links) if (l) move(l, &theirs[l->peer()], sizeof(Intro), false, opts, deadline);

  std::vector<Upgrade> plan(size);
  for (int p = 0; p < size; ++p) {
    if (!links[p]) continue;
    const Intro& t = theirs[p];
    if (t.magic != kIntroMagic) throw PeerLostError("rank " + std::to_string(p) + " sent no transport intro");
    bool wanted = mine.mode != static_cast<uint8_t>(TransportKind::kTcp) &&
                  t.mode != static_cast<uint8_t>(TransportKind::kTcp);
    bool sameHost = !host.empty() && std::strncmp(mine.host, t.host, sizeof(mine.host)) == 0;
    bool forced = mine.mode == static_cast<uint8_t>(TransportKind::kShm) ||
                  t.mode == static_cast<uint8_t>(TransportKind::kShm);
    if (forced && !(wanted && sameHost)) {
      throw InvalidArgument("PYCOLLECT_TRANSPORT: rank " + std::to_string(self) + " (" +
                            modeName(mine.mode) + ") and rank " + std::to_string(p) + " (" +
                            modeName(t.mode) + ") cannot share memory: " +
                            (wanted ? "they are on different hosts or IPC namespaces"
                                    : "one of them asked for tcp"));
    }
    plan[p].chosen = wanted && sameHost;
    plan[p].forced = forced;
    plan[p].side = self < p ? 0 : 1;
    plan[p].peerPid = t.pid;
    plan[p].peerBell = t.bell;
  }
  auto canReadPeer = [&](int p) { return canRead(theirs[p].pid, {theirs[p].probeAddress, theirs[p].probeValue}); };
  const size_t bytes = segmentBytes(kRingBytes);
  // Lower ranks create and offer.
  for (int p = self + 1; p < size; ++p) {
    if (!plan[p].chosen) continue;
    Offer o;  // an empty name says "none": the peer answers not opened
    try {
      plan[p].segment = Segment::create(bytes, p);
      static_cast<Header*>(plan[p].segment.data())->magic = kSegmentMagic;
      std::strncpy(o.name, plan[p].segment.name().c_str(), sizeof(o.name) - 1);
    } catch (const Error&) {
      if (plan[p].forced) throw;
    }
    o.canRead = canReadPeer(p);
    move(links[p], &o, sizeof(o), true, opts, deadline);
  }
  // Higher ranks open, unlink and answer.
  std::string failed;
  for (int p = 0; p < self; ++p) {
    if (!plan[p].chosen) continue;
    Offer o;
    move(links[p], &o, sizeof(o), false, opts, deadline);
    o.name[sizeof(o.name) - 1] = 0;
    Reply rep;
    std::string why = o.name[0] ? "" : "rank " + std::to_string(p) + " could not create a segment";
    if (why.empty()) {
      try {
        plan[p].segment = Segment::open(o.name, bytes, p);
        rep.opened = static_cast<Header*>(plan[p].segment.data())->magic == kSegmentMagic;
      } catch (const Error& e) {
        why = e.what();
      }
    }
    rep.canRead = canReadPeer(p);
    plan[p].singleCopy = o.canRead != 0;
    move(links[p], &rep, sizeof(rep), true, opts, deadline);
    if (!rep.opened) {
      plan[p].chosen = false;
      if (plan[p].forced) failed = why;
    }
  }
  for (int p = self + 1; p < size; ++p) {
    if (!plan[p].chosen) continue;
    Reply rep;
    move(links[p], &rep, sizeof(rep), false, opts, deadline);
    plan[p].segment.unlink();  // the peer has it mapped, or will never map it
    plan[p].singleCopy = rep.canRead != 0;
    if (!rep.opened) {
      plan[p].chosen = false;
      if (plan[p].forced) failed = "rank " + std::to_string(p) + " could not map the segment this rank offered";
    }
  }
  if (!failed.empty()) {
    throw InvalidArgument("PYCOLLECT_TRANSPORT=shm: rank " + std::to_string(self) + ": " + failed);
  }
  for (auto& u : plan) if (!u.chosen) u.segment = Segment();
  return plan;
}

}  // namespace mesh
}  // namespace pycollect
