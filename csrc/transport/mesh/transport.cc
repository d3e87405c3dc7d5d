#include "transport/mesh/transport.h"

#include <algorithm>
#include <thread>

#include "common/error.h"

namespace pycollect {
namespace mesh {

Transport::Transport(TransportKind mode, const TransportOptions& options)
    : options_(options), maker_(mode, options), kinds_(new std::atomic<const char*>[options.size]) {
  for (int p = 0; p < options.size; ++p) kinds_[p].store(nullptr);
}

std::vector<pycollect::Link*> Transport::connect(const std::vector<Endpoint>& peers, uint64_t token) {
  const int self = options_.rank, size = options_.size;
  maker_.start(peers, token, [this] { wake(); });
  for (int c = 0; c < kChannels; ++c) {
    for (int p = 0; p < size; ++p) {
      const int slot = static_cast<int>(links_.size());
      links_.push_back(p == self ? nullptr : std::make_unique<PeerLink>(p, slot, &wanted_));
    }
  }
  std::vector<pycollect::Link*> links = this->links(Channel::kCollectives);
  // The links made now: both ends agree on them, and each is dialed by its lower end.
  std::vector<int> first;
  if (options_.allLinksAtStart) {
    for (int p = 0; p < size; ++p) {
      if (p != self) first.push_back(p);
    }
  } else if (size > 1) {
    first.push_back((self + 1) % size);
    if (size > 2) first.push_back((self + size - 1) % size);
  }
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(options_.timeoutSec));
  for (int p : first) {
    if (p > self) maker_.dial(p, Channel::kCollectives, deadline);
  }
  maker_.awaitMade(first, deadline);
  adoptMade();
  return links;
}

std::vector<pycollect::Link*> Transport::links(Channel channel) {
  const int size = options_.size, first = static_cast<int>(channel) * size;
  std::vector<pycollect::Link*> out(size, nullptr);
  if (links_.empty()) throw InvalidArgument("the links of a channel are there once connect() was called");
  for (int p = 0; p < size; ++p) out[p] = links_[first + p].get();
  return out;
}

void Transport::adoptMade() {
  for (Made& m : maker_.takeMade()) {
    pycollect::Link* made;
    // Both channels' links to a peer are chosen alike (the same two Intros, upgrade.h).
    if (m.shm) {
      made = m.shm.get();
      kinds_[m.peer].store("shm");
      shm_.push_back(std::move(m.shm));
    } else {
      made = m.tcp.get();
      kinds_[m.peer].store("tcp");
      tcp_.adopt(std::move(m.tcp));
    }
    links_[static_cast<int>(m.channel) * options_.size + m.peer]->attach(made);
  }
}

void Transport::makeWanted() {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                     std::min(options_.timeoutSec, options_.linkTimeoutSec)));
  for (size_t i = 0; i < wanted_.size();) {
    PeerLink& l = *links_[wanted_[i]];
    if (!l.waiting()) {
      wanted_[i] = wanted_.back();
      wanted_.pop_back();
      continue;
    }
    const int p = l.peer();
    const auto channel = static_cast<Channel>(l.slot() / options_.size);
    maker_.rethrowFailure(p, channel);
    // Stopped (the group failed or is closing): no link is made any more, and a post that
    // waits for one (being made by the peer's dial, say) would wait for ever.
    if (maker_.stopped()) tcp::throwCancelled(maker_.meshOptions());
    if (maker_.shouldDial(p, channel)) maker_.dial(p, channel, deadline);  // blocks for its handshake: milliseconds
    ++i;
  }
  if (maker_.anyMade()) adoptMade();
}

void Transport::progress() {
  if (maker_.anyMade()) adoptMade();
  if (!wanted_.empty()) makeWanted();
  tcp_.progress();
  for (auto& l : shm_) {
    if (l->busy()) l->progress();
  }
}

bool Transport::busy() const {
  if (!wanted_.empty() || tcp_.busy()) return true;
  for (auto& l : shm_) {
    if (l->busy()) return true;
  }
  return false;
}

void Transport::checkPeers() {
  // Shared-memory links only: a TCP link's loss shows in its driver's next progress().
  for (auto& l : shm_) l->checkAlive();
}

bool Transport::spin(Clock::time_point until) {
  auto end = std::min(until, Clock::now() + kSpin);
  for (;;) {
    for (auto& l : shm_) {
      if (l->busy() && l->moved()) return true;
    }
    if (woken_.exchange(false, std::memory_order_acq_rel)) return true;
    if (Clock::now() >= end) return Clock::now() >= until;
    // Yield rather than pause: on a machine with more busy threads than cores (ranks,
    // their Python threads, other jobs) the peer we wait for may need this core.
    std::this_thread::yield();
  }
}

void Transport::waitReady(Clock::time_point until) {
  // A link being made by the peer arrives with a wake(); a dial that was stood down is
  // retried after a while (maker.h), so look again at least that often.
  if (!wanted_.empty()) until = std::min(until, Clock::now() + std::chrono::milliseconds(50));
  armed_.clear();
  fds_.clear();
  for (auto& l : shm_) {
    if (l->busy()) armed_.push_back(l.get());
  }
  if (!armed_.empty()) {
    if (spin(until)) return;
    bool moved = false;
    for (shm::Link* l : armed_) moved = l->arm() || moved;
    if (!moved && !woken_.exchange(false)) {
      for (shm::Link* l : armed_) fds_.push_back(l->fd());  // the peers' deaths and aborts
      fds_.push_back(maker_.bell());                        // their rings
      tcp_.waitReady(until, fds_);
      maker_.drainBell();
    }
    for (shm::Link* l : armed_) l->disarm();
    return;
  }
  tcp_.waitReady(until, fds_);
}

const char* Transport::linkKind(int peer) const {
  return peer >= 0 && peer < options_.size ? kinds_[peer].load() : nullptr;
}

void Transport::wake() {
  woken_.store(true, std::memory_order_release);
  tcp_.wake();
}

void Transport::close() {
  maker_.stop();
  for (auto& l : shm_) l->close();
  tcp_.close();
}

}  // namespace mesh
}  // namespace pycollect
