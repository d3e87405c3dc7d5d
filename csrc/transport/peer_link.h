// The link to one peer as the engine holds it from the moment the group forms, made
// or not. Links are made when first used (mesh/maker.h): posts made before then wait
// here, in order, and go to the made link when it arrives (attach), so their tickets
// stay what they were (a fresh link numbers its posts from 0, as this one did); from
// then on every call is passed on. The first post that has to wait puts the link on
// the transport's list of links wanted, so the transport never scans every peer.
#pragma once

#include <atomic>
#include <utility>
#include <vector>

#include "transport/link.h"

namespace pycollect {

class PeerLink final : public Link {
 public:
  // `wanted`: the transport's list, driven by the same thread as this link, on which the
  // link puts `slot` (the transport's index of it: its peer and channel).
  PeerLink(int peer, int slot, std::vector<int>* wanted) : peer_(peer), slot_(slot), wanted_(wanted) {}

  int peer() const override { return peer_; }
  int slot() const { return slot_; }
  // The link that carries the bytes, once made; nullptr before.
  Link* made() const { return real_.load(std::memory_order_acquire); }
  // Posts wait for the link to be made.
  bool waiting() const { return made() == nullptr && !aborted_ && (!sends_.empty() || !recvs_.empty()); }
  // Hands the waiting posts to `real` (fresh: nothing posted on it yet), which carries
  // everything from now on. After abort() it is only closed: the group failed.
  void attach(Link* real);

  bool withdrawRecv(uint64_t ticket, size_t bytes) override;
  bool sent(uint64_t ticket) const override {
    Link* l = made();
    return l != nullptr ? l->sent(ticket) : aborted_;
  }
  bool received(uint64_t ticket) const override {
    Link* l = made();
    return l != nullptr ? l->received(ticket) : aborted_;
  }
  bool sendPending() const override {
    Link* l = made();
    return l != nullptr ? l->sendPending() : !aborted_ && !sends_.empty();
  }
  bool recvPending() const override {
    Link* l = made();
    return l != nullptr ? l->recvPending() : !aborted_ && !recvs_.empty();
  }
  void abort() override;
  void interrupt() override {
    if (Link* l = made()) l->interrupt();
  }
  void close() override {
    if (Link* l = made()) l->close();
  }

 protected:
  uint64_t queueSend(const void* data, size_t bytes) override;
  uint64_t queueRecv(void* data, size_t bytes) override;

 private:
  void want();

  int peer_;
  int slot_;
  std::vector<int>* wanted_;
  std::atomic<Link*> real_{nullptr};
  bool aborted_ = false;  // every waiting post counts as done (RangeQueue::abandon)
  std::vector<std::pair<const void*, size_t>> sends_;
  std::vector<std::pair<void*, size_t>> recvs_;
};

}  // namespace pycollect
