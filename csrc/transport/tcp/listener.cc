#include "transport/tcp/listener.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "common/error.h"

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

Acceptor::Acceptor(Listener& listener, const MeshOptions& opts, Admit admit, std::function<void(int, int)> release)
    : listener_(listener), opts_(opts), admit_(std::move(admit)), release_(std::move(release)),
      log_(opts.rank, listener.address().port()) {
  listener_.socket().setNonBlocking();
}

Acceptor::~Acceptor() {
  for (auto& in : incoming_) log_.add(in.from(), {Refusal::kSilent, "the group closed"}, Clock::now());
}

void Acceptor::refuse(size_t i, const Verdict& v, Clock::time_point now) {
  if (incoming_[i].admitted()) release_(incoming_[i].peer(), incoming_[i].channel());
  if (v.refusal == Refusal::kAuthFailed) authFailed_.insert(incoming_[i].peer());
  log_.add(incoming_[i].from(), v, now);
  incoming_.erase(incoming_.begin() + i);
}

// Makes room by dropping the connection that has waited longest without a Hello.
bool Acceptor::evictOldestSilent(Clock::time_point now) {
  for (size_t i = 0; i < incoming_.size(); ++i) {
    if (incoming_[i].greeted()) continue;
    refuse(i, {Refusal::kSilent, "dropped without a greeting to make room for newer connections"}, now);
    return true;
  }
  return false;
}

// Accepts everything waiting. Returns false when out of descriptors with nothing to
// drop: the caller pauses accepting instead of spinning on a readable listener.
bool Acceptor::acceptWaiting(std::vector<std::unique_ptr<Link>>& made) {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd = ::accept4(listener_.socket().fd(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
    auto now = Clock::now();
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (outOfDescriptors(errno) && evictOldestSilent(now)) continue;
      return false;
    }
    Socket s(fd);
    configure(s, opts_);
    incoming_.emplace_back(std::move(s), Address::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len), kGrace);
    step(incoming_.size() - 1, now, made);  // a real peer's Hello is usually there already
    if (incoming_.size() > kMaxIncoming) evictOldestSilent(now);
  }
}

// Returns whether incoming_[i] is still there.
bool Acceptor::step(size_t i, Clock::time_point now, std::vector<std::unique_ptr<Link>>& made) {
  switch (incoming_[i].step(opts_, admit_, now)) {
    case Incoming::State::kWaiting: return true;
    case Incoming::State::kRefused: refuse(i, incoming_[i].verdict(), now); return false;
    case Incoming::State::kStoodDown: incoming_.erase(incoming_.begin() + i); return false;
    case Incoming::State::kAccepted: break;
  }
  int peer = incoming_[i].peer();
  const int channel = incoming_[i].channel();
  made.push_back(std::make_unique<Link>(incoming_[i].takeSocket(), peer, channel, opts_.linkTimeoutSec));
  authFailed_.erase(peer);  // a stranger claimed its rank before it came
  incoming_.erase(incoming_.begin() + i);
  return false;
}

std::vector<std::unique_ptr<Link>> Acceptor::round(Clock::time_point until, int wakeFd) {
  std::vector<std::unique_ptr<Link>> made;
  auto now = Clock::now();
  bool listening = now >= pausedUntil_;
  fds_.clear();
  fds_.push_back({wakeFd, POLLIN, 0});
  if (listening) fds_.push_back({listener_.socket().fd(), POLLIN, 0});
  for (auto& in : incoming_) fds_.push_back({in.fd(), POLLIN, 0});
  int ms = std::min(msUntil(listening ? until : std::min(until, pausedUntil_)), kPollMs);
  if (::poll(fds_.data(), fds_.size(), ms) < 0 && errno != EINTR) {
    throw Error(syscallMessage("poll", errno, "while accepting peers"));
  }
  if (listening && (fds_[1].revents & POLLIN) && !acceptWaiting(made)) pausedUntil_ = Clock::now() + kBackoff;
  now = Clock::now();
  for (size_t i = 0; i < incoming_.size();) i += step(i, now, made) ? 1 : 0;
  log_.flush(now, false);
  return made;
}

}  // namespace tcp
}  // namespace pycollect
