// The listening half: a socket bound to a kernel-chosen port, and the Acceptor that
// greets whoever connects to it (incoming.h) for as long as the group lives, since a
// link is made when one of its ends first needs it (mesh/maker.h).
#pragma once

#include <poll.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "transport/tcp/address.h"
#include "transport/tcp/incoming.h"
#include "transport/tcp/link.h"
#include "transport/tcp/mesh.h"
#include "transport/tcp/refusals.h"
#include "transport/tcp/socket.h"

namespace pycollect {
namespace tcp {

class Listener {
 public:
  // Binds `host` (numeric IPv4/IPv6 or a name) on a kernel-chosen port and listens.
  explicit Listener(const std::string& host);
  const Address& address() const { return address_; }
  Socket& socket() { return socket_; }
  void close() { socket_.close(); }

 private:
  Socket socket_;
  Address address_;
};

// Greets the connections that come to a Listener, one thread's job. Strangers are
// refused without disturbing the real peers: at most kMaxIncoming handshakes run at
// once (the oldest silent one makes room), each stage has a grace period, and when the
// process runs out of descriptors accepting pauses for a moment.
class Acceptor {
 public:
  // `admit` says whether a complete Hello is taken (incoming.h); `release(peer, channel)`
  // undoes that when the connection then fails (a wrong proof of the secret).
  Acceptor(Listener& listener, const MeshOptions& opts, Admit admit, std::function<void(int, int)> release);
  // Connections still being greeted are strangers now: the group is closing. They are
  // counted among the refusals, whose summary is printed.
  ~Acceptor();

  // Waits until `until` (at most a fraction of a second) for a connection, a greeting's
  // next bytes or `wakeFd`, then accepts and greets whatever came. Returns the links
  // whose handshake completed, their peers admitted.
  std::vector<std::unique_ptr<Link>> round(Clock::time_point until, int wakeFd);

  // Whether a connection claiming to be `peer` failed on the secret since `peer` last
  // connected (what to say instead of a timeout).
  bool authFailed(int peer) const { return authFailed_.count(peer) != 0; }

 private:
  void refuse(size_t i, const Verdict& v, Clock::time_point now);
  bool evictOldestSilent(Clock::time_point now);
  bool acceptWaiting(std::vector<std::unique_ptr<Link>>& made);
  bool step(size_t i, Clock::time_point now, std::vector<std::unique_ptr<Link>>& made);

  Listener& listener_;
  const MeshOptions& opts_;
  Admit admit_;
  std::function<void(int, int)> release_;
  std::vector<Incoming> incoming_;  // oldest first
  std::set<int> authFailed_;
  RefusalLog log_;
  Clock::time_point pausedUntil_{};
  std::vector<pollfd> fds_;
};

}  // namespace tcp
}  // namespace pycollect
