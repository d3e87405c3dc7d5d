#include "transport/tcp/listener.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "common/error.h"
#include "transport/tcp/incoming.h"
#include "transport/tcp/mesh.h"
#include "transport/tcp/refusals.h"

namespace pycollect {
namespace tcp {
namespace {

constexpr auto kGrace = std::chrono::seconds(2);  // for each handshake stage of a connection
constexpr size_t kMaxIncoming = 16;               // handshakes in progress at once
constexpr auto kBackoff = std::chrono::milliseconds(100);  // out of descriptors: pause accepting
constexpr int kPollMs = 200;

bool outOfDescriptors(int err) {
  return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

// The mesh's accepting side: connections being greeted, and what they came to.
struct Acceptor {
  Listener& listener;
  std::vector<std::unique_ptr<Link>>& links;
  const MeshOptions& opts;
  std::vector<Incoming> incoming;  // oldest first
  std::set<int> authFailed;        // ranks whose (claimed) handshake failed on the secret
  RefusalLog log;
  int missing;

  void refuse(size_t i, const Verdict& v, Clock::time_point now) {
    if (v.refusal == Refusal::kAuthFailed) authFailed.insert(incoming[i].peer());
    log.add(incoming[i].from(), v, now);
    incoming.erase(incoming.begin() + i);
  }

  // Makes room by dropping the connection that has waited longest without a Hello.
  bool evictOldestSilent(Clock::time_point now) {
    for (size_t i = 0; i < incoming.size(); ++i) {
      if (incoming[i].greeted()) continue;
      refuse(i, {Refusal::kSilent, "dropped without a greeting to make room for newer connections"}, now);
      return true;
    }
    return false;
  }

  // Accepts everything waiting. Returns false when out of descriptors with nothing
  // to drop: the caller pauses accepting instead of spinning on a readable listener.
  bool acceptWaiting() {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      int fd = ::accept4(listener.socket().fd(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
      auto now = Clock::now();
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
        if (outOfDescriptors(errno) && evictOldestSilent(now)) continue;
        return false;
      }
      Socket s(fd);
      configure(s, opts);
      incoming.emplace_back(std::move(s), Address::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len), kGrace);
      step(incoming.size() - 1, now);  // a real peer's Hello is usually there already
      if (incoming.size() > kMaxIncoming) evictOldestSilent(now);
    }
  }

  // Returns whether incoming[i] is still there.
  bool step(size_t i, Clock::time_point now) {
    switch (incoming[i].step(opts, links, now)) {
      case Incoming::State::kWaiting: return true;
      case Incoming::State::kRefused: refuse(i, incoming[i].verdict(), now); return false;
      case Incoming::State::kAccepted: break;
    }
    int peer = incoming[i].peer();
    links[peer] = std::make_unique<Link>(incoming[i].takeSocket(), peer, opts.linkTimeoutSec);
    authFailed.erase(peer);  // a stranger claimed its rank before it came
    --missing;
    incoming.erase(incoming.begin() + i);
    return false;
  }

  // Why the mesh could not be completed: the ranks still missing and, for those,
  // a failed authentication, which says more than a timeout does.
  [[noreturn]] void fail(bool cancelled) {
    std::string who, auth;
    for (int r = 0; r < opts.rank; ++r) {
      if (links[r]) continue;
      who += (who.empty() ? "" : ", ") + std::to_string(r);
      if (authFailed.count(r) && auth.empty()) auth = authFailedMessage(opts.rank, r);
    }
    if (!auth.empty()) throw Error(auth);
    if (cancelled) throwCancelled(opts);
    throw TimeoutError("rank " + std::to_string(opts.rank) + ": rank(s) " + who +
                       " did not connect within " + std::to_string(opts.timeoutSec) + " s");
  }
};

}  // namespace

Listener::Listener(const std::string& host) {
  Address want = Address::resolve(host, 0);
  socket_ = Socket::create(want.family());
  int one = 1;
  ::setsockopt(socket_.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(socket_.fd(), reinterpret_cast<const sockaddr*>(&want.storage), want.length) < 0) {
    throw Error(syscallMessage("bind", errno, "to " + want.str()));
  }
  if (::listen(socket_.fd(), 1024) < 0) throw Error(syscallMessage("listen", errno, ""));
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(socket_.fd(), reinterpret_cast<sockaddr*>(&ss), &len);
  address_ = Address::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
}

// Accepts connections until every lower rank has greeted us correctly. Strangers
// are refused without disturbing the real peers: at most kMaxIncoming handshakes
// run at once (the oldest silent one makes room), each stage has kGrace, and when
// the process runs out of descriptors accepting pauses for kBackoff. A real peer
// that comes late is still accepted until the rendezvous deadline.
void acceptLower(Listener& listener, std::vector<std::unique_ptr<Link>>& links,
                 const MeshOptions& opts, Clock::time_point deadline) {
  Acceptor a{listener, links, opts, {}, {}, RefusalLog(opts.rank, listener.address().port()), opts.rank};
  listener.socket().setNonBlocking();
  Clock::time_point pausedUntil{};
  std::vector<pollfd> fds;
  while (a.missing > 0) {
    auto now = Clock::now();
    // Checked after a full pass, so an authentication failure that is on its way
    // is seen before giving up.
    if (opts.cancelled() || now >= deadline) a.fail(opts.cancelled());
    bool listening = now >= pausedUntil;
    fds.clear();
    if (listening) fds.push_back({listener.socket().fd(), POLLIN, 0});
    for (auto& in : a.incoming) fds.push_back({in.fd(), POLLIN, 0});
    int ms = std::min(msUntil(listening ? deadline : std::min(deadline, pausedUntil)), kPollMs);
    if (::poll(fds.data(), fds.size(), ms) < 0 && errno != EINTR) {
      throw Error(syscallMessage("poll", errno, "while accepting peers"));
    }
    if (listening && (fds[0].revents & POLLIN) && !a.acceptWaiting()) {
      pausedUntil = Clock::now() + kBackoff;
    }
    now = Clock::now();
    for (size_t i = 0; i < a.incoming.size();) i += a.step(i, now) ? 1 : 0;
    a.log.flush(now, false);
  }
  // Connections still being greeted are strangers: the mesh is complete.
  for (auto& in : a.incoming) a.log.add(in.from(), {Refusal::kSilent, "mesh complete"}, Clock::now());
}

}  // namespace tcp
}  // namespace pycollect
