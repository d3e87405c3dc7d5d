#include "transport/mesh/maker.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "common/error.h"
#include "transport/mesh/doorbell.h"
#include "transport/tcp/address.h"

namespace pycollect {
namespace mesh {
namespace {

// How long a rank whose dial was stood down waits for the peer's dial before it dials
// again (the peer's may have failed; a second dial finds out why).
constexpr auto kAwait = std::chrono::seconds(5);

}  // namespace

LinkMaker::LinkMaker(TransportKind mode, const TransportOptions& options)
    : mode_(mode), options_(options), state_(kChannels * options.size, State::kNone),
      awaitUntil_(kChannels * options.size), errors_(kChannels * options.size) {
  mesh_.rank = options.rank;
  mesh_.size = options.size;
  mesh_.timeoutSec = options.timeoutSec;
  mesh_.socketBuffer = options.socketBuffer;
  mesh_.secret = options.secret;
  mesh_.linkTimeoutSec = options.linkTimeoutSec;
  mesh_.cancel = &cancel_;
}

Endpoint LinkMaker::listen(const std::string& host) {
  listener_ = std::make_unique<tcp::Listener>(host);
  return {listener_->address().host(), listener_->address().port()};
}

void LinkMaker::start(const std::vector<Endpoint>& peers, uint64_t token, std::function<void()> wake) {
  if (!listener_) throw InvalidArgument("call listen() before connect()");
  if (static_cast<int>(peers.size()) != options_.size) throw InvalidArgument("connect: need one address per rank");
  peers_ = peers;
  mesh_.token = token;
  wake_ = std::move(wake);
  if (mode_ != TransportKind::kTcp) bell_ = std::make_unique<shm::Bell>();
  local_ = localSide(mode_, options_.hostTag, bell());
  wakeFd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd_ < 0) throw Error(syscallMessage("eventfd", errno, "creating the acceptor's wake-up fd"));
  fork::track(wakeFd_);
  acceptor_ = std::thread([this] { acceptLoop(); });
}

Clock::time_point LinkMaker::linkDeadline() const {
  double s = std::min(options_.timeoutSec, options_.linkTimeoutSec);
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

void LinkMaker::acceptLoop() {
  tcp::Acceptor acceptor(
      *listener_, mesh_, [this](int peer, int channel) { return admit(peer, channel); },
      [this](int peer, int channel) { release(peer, channel); });
  while (!cancel_.load()) {
    std::vector<std::unique_ptr<tcp::Link>> links;
    try {
      links = acceptor.round(Clock::now() + std::chrono::seconds(1), wakeFd_);
    } catch (const std::exception&) {
      // poll failed (out of memory): try again after a pause, as accepting does when out of descriptors
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int p = 0; p < options_.size; ++p) {
        if (acceptor.authFailed(p)) authFailed_.insert(p);
      }
    }
    for (auto& l : links) finish(std::move(l), linkDeadline());
  }
}

tcp::Admission LinkMaker::admit(int peer, int channel) {
  std::lock_guard<std::mutex> lock(mu_);
  const int i = slot(peer, static_cast<Channel>(channel));
  State& s = state_[i];
  switch (s) {
    case State::kDialing:
      if (options_.rank < peer) return tcp::Admission::kStandDown;  // our dial is the link
      break;
    case State::kAccepting:
    case State::kMade:
      return tcp::Admission::kStandDown;  // it is made or being made: a dial from before
    case State::kNone:
    case State::kAwaiting:
    case State::kFailed:
      break;
  }
  s = State::kAccepting;
  errors_[i] = StoredError();
  return tcp::Admission::kTake;
}

void LinkMaker::release(int peer, int channel) {
  std::lock_guard<std::mutex> lock(mu_);
  const int i = slot(peer, static_cast<Channel>(channel));
  if (state_[i] == State::kAccepting) state_[i] = State::kNone;
}

bool LinkMaker::dialable(int i) const {
  return state_[i] == State::kNone || (state_[i] == State::kAwaiting && Clock::now() >= awaitUntil_[i]);
}

bool LinkMaker::shouldDial(int peer, Channel channel) {
  std::lock_guard<std::mutex> lock(mu_);
  return dialable(slot(peer, channel));
}

void LinkMaker::dial(int peer, Channel channel, Clock::time_point deadline) {
  const int i = slot(peer, channel);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!dialable(i)) return;
    state_[i] = State::kDialing;
  }
  std::unique_ptr<tcp::Link> link;
  try {
    link = tcp::connectTo(peer, static_cast<int>(channel), tcp::Address::resolve(peers_[peer].host, peers_[peer].port),
                          mesh_, deadline);
  } catch (...) {
    fail(i, StoredError::of(std::current_exception()));
    return;
  }
  if (link) {
    finish(std::move(link), deadline);
    return;
  }
  // Stood down: the peer's own dial is the link; unless our acceptor took it already, wait for it.
  std::lock_guard<std::mutex> lock(mu_);
  if (state_[i] == State::kDialing) {
    state_[i] = State::kAwaiting;
    awaitUntil_[i] = Clock::now() + kAwait;
  }
}

void LinkMaker::finish(std::unique_ptr<tcp::Link> link, Clock::time_point deadline) {
  const int peer = link->peer();
  const Channel channel = static_cast<Channel>(link->channel());
  const int i = slot(peer, channel);
  Made m;
  m.peer = peer;
  m.channel = channel;
  try {
    Upgrade u = negotiate(*link, local_, mesh_, deadline);
    if (u.chosen) {
      auto doorbell = std::make_unique<TcpDoorbell>(std::move(link), shm::Bell::borrow(u.peerPid, u.peerBell));
      m.shm = std::make_unique<shm::Link>(std::move(doorbell), std::move(u.segment), u.side, u.peerPid,
                                          u.singleCopy ? options_.shmSingleCopyBytes : shm::kNoSingleCopy);
    } else {
      m.tcp = std::move(link);
    }
  } catch (...) {
    fail(i, StoredError::of(std::current_exception()));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_[i] = State::kMade;
    made_.push_back(std::move(m));
    anyMade_.store(true, std::memory_order_release);
  }
  changed_.notify_all();
  if (wake_) wake_();
}

void LinkMaker::fail(int i, StoredError error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_[i] = State::kFailed;
    errors_[i] = std::move(error);
  }
  changed_.notify_all();
  if (wake_) wake_();
}

std::vector<Made> LinkMaker::takeMade() {
  std::lock_guard<std::mutex> lock(mu_);
  anyMade_.store(false, std::memory_order_relaxed);
  return std::move(made_);
}

void LinkMaker::rethrowFailure(int peer, Channel channel) const {
  const int i = slot(peer, channel);
  StoredError e;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_[i] == State::kFailed) e = errors_[i];
  }
  if (e) e.raise();
}

void LinkMaker::awaitMade(const std::vector<int>& peers, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    std::string missing, auth;
    for (int p : peers) {
      const int i = slot(p, Channel::kCollectives);
      if (state_[i] == State::kFailed) errors_[i].raise();
      if (state_[i] == State::kMade) continue;
      missing += (missing.empty() ? "" : ", ") + std::to_string(p);
      if (authFailed_.count(p) && auth.empty()) auth = tcp::authFailedMessage(options_.rank, p);
    }
    if (missing.empty()) return;
    if (cancel_.load() || Clock::now() >= deadline) {
      if (!auth.empty()) throw Error(auth);
      if (cancel_.load()) tcp::throwCancelled(mesh_);
      throw TimeoutError("rank " + std::to_string(options_.rank) + ": rank(s) " + missing +
                         " did not connect within " + std::to_string(options_.timeoutSec) + " s");
    }
    // In slices: cancel() sets a flag and notifies, but a notify may come between our
    // check and the wait.
    changed_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
  }
}

void LinkMaker::cancel() {
  cancel_.store(true);
  changed_.notify_all();
  if (wakeFd_ >= 0) {
    uint64_t one = 1;
    ssize_t ignored = ::write(wakeFd_, &one, sizeof(one));
    (void)ignored;
  }
}

void LinkMaker::stop() {
  if (!owner_.here()) {
    // A forked child: the acceptor thread was not copied, and the fork handler closed the
    // descriptors. A joinable std::thread would end the process when destroyed: leak it.
    if (acceptor_.joinable()) new std::thread(std::move(acceptor_));
    return;
  }
  std::lock_guard<std::mutex> once(stopMu_);
  cancel();
  if (acceptor_.joinable()) acceptor_.join();
  if (listener_) listener_->close();
  if (wakeFd_ >= 0) {
    fork::untrack(wakeFd_);
    ::close(wakeFd_);
    wakeFd_ = -1;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& m : made_) {
    if (m.tcp) m.tcp->close();
    if (m.shm) m.shm->close();
  }
  made_.clear();
}

}  // namespace mesh
}  // namespace pycollect
