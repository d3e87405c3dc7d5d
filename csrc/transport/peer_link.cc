#include "transport/peer_link.h"

#include "common/error.h"

namespace pycollect {

void PeerLink::want() {
  if (sends_.size() + recvs_.size() == 1) wanted_->push_back(slot_);
}

uint64_t PeerLink::queueSend(const void* data, size_t bytes) {
  if (Link* l = made()) return l->queueSend(data, bytes);
  sends_.emplace_back(data, bytes);
  want();
  return sends_.size() - 1;
}

uint64_t PeerLink::queueRecv(void* data, size_t bytes) {
  if (Link* l = made()) return l->queueRecv(data, bytes);
  recvs_.emplace_back(data, bytes);
  want();
  return recvs_.size() - 1;
}

bool PeerLink::withdrawRecv(uint64_t ticket, size_t bytes) {
  if (Link* l = made()) return l->withdrawRecv(ticket, bytes);
  if (aborted_ || recvs_.empty() || ticket + 1 != recvs_.size() || recvs_.back().second != bytes) return false;
  recvs_.pop_back();  // if nothing else waits, the transport drops the link from its wanted list
  return true;
}

void PeerLink::attach(Link* real) {
  if (aborted_) {
    real->close();
    return;
  }
  for (size_t i = 0; i < sends_.size(); ++i) {
    if (real->queueSend(sends_[i].first, sends_[i].second) != i) {
      throw Error("the link to rank " + std::to_string(peer_) + " was not fresh when it was made");
    }
  }
  for (size_t i = 0; i < recvs_.size(); ++i) {
    if (real->queueRecv(recvs_[i].first, recvs_[i].second) != i) {
      throw Error("the link to rank " + std::to_string(peer_) + " was not fresh when it was made");
    }
  }
  sends_.clear();
  recvs_.clear();
  real_.store(real, std::memory_order_release);
}

void PeerLink::abort() {
  if (Link* l = made()) {
    l->abort();
    return;
  }
  aborted_ = true;
  sends_.clear();
  recvs_.clear();
}

}  // namespace pycollect
