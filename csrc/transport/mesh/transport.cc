#include "transport/mesh/transport.h"

#include <thread>

#include "transport/mesh/doorbell.h"
#include "transport/mesh/upgrade.h"

namespace pycollect {
namespace mesh {

std::vector<pycollect::Link*> Transport::connect(const std::vector<Endpoint>& peers, uint64_t token) {
  std::vector<pycollect::Link*> links = tcp_.connect(peers, token);
  std::vector<tcp::Link*> tcpLinks;
  for (pycollect::Link* l : links) tcpLinks.push_back(static_cast<tcp::Link*>(l));
  const tcp::MeshOptions mo = tcp_.meshOptions(token);
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(options_.timeoutSec));
  if (mode_ != TransportKind::kTcp) bell_ = std::make_unique<shm::Bell>();
  std::vector<Upgrade> plan = negotiate(tcpLinks, mode_, options_.hostTag, bell_ ? bell_->fd() : -1, mo, deadline);
  isShm_.assign(links.size(), false);
  for (size_t p = 0; p < plan.size(); ++p) {
    if (!plan[p].chosen) continue;
    auto doorbell = std::make_unique<TcpDoorbell>(tcp_.detach(static_cast<int>(p)),
                                                  shm::Bell::borrow(plan[p].peerPid, plan[p].peerBell));
    shm_.push_back(std::make_unique<shm::Link>(std::move(doorbell), std::move(plan[p].segment), plan[p].side,
                                               plan[p].peerPid,
                                               plan[p].singleCopy ? options_.shmSingleCopyBytes : shm::kNoSingleCopy));
    links[p] = shm_.back().get();
    isShm_[p] = true;
  }
  return links;
}

void Transport::progress() {
  tcp_.progress();
  for (auto& l : shm_) {
    if (l->busy()) l->progress();
  }
}

bool Transport::busy() const {
  if (tcp_.busy()) return true;
  for (auto& l : shm_) {
    if (l->busy()) return true;
  }
  return false;
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
      fds_.push_back(bell_->fd());                          // their rings
      tcp_.waitReady(until, fds_);
      bell_->drain();
    }
    for (shm::Link* l : armed_) l->disarm();
    return;
  }
  tcp_.waitReady(until);
}

const char* Transport::linkKind(int peer) const {
  return peer >= 0 && peer < static_cast<int>(isShm_.size()) && isShm_[peer] ? "shm" : "tcp";
}

void Transport::wake() {
  woken_.store(true, std::memory_order_release);
  tcp_.wake();
}

void Transport::close() {
  for (auto& l : shm_) l->close();
  tcp_.close();
}

}  // namespace mesh
}  // namespace pycollect
