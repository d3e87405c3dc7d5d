#include "collectives/context.h"

#include <algorithm>
#include <cstdio>

#include "common/error.h"
#include "transport/wait.h"

namespace pycollect {

std::string describeCall(const WireHeader& h) {
  auto kind = static_cast<OpKind>(h.kind);
  std::string s = opKindName(kind);
  s += "(count=" + std::to_string(h.count);
  if (kind != OpKind::kBarrier) s += std::string(", ") + dtypeName(static_cast<DType>(h.dtype));
  if (kind == OpKind::kAllReduce || kind == OpKind::kReduceScatter) {
    s += std::string(", ") + reduceOpName(static_cast<ReduceOp>(h.redop));
  }
  if (kind == OpKind::kBroadcast) s += ", root=" + std::to_string(h.root);
  if (kind == OpKind::kSend) s += ", tag=" + std::to_string(h.root);
  auto algo = static_cast<Algo>(h.algo);
  if (kind == OpKind::kAllReduce && algo != Algo::kAuto) s += std::string(", ") + algoName(algo);
  s += ")";
  return s;
}

Context::Context(int rank, int size, Transport& transport, const std::vector<Link*>& links,
                 const WireHeader& call, Clock::time_point deadline, const Tunables& tunables,
                 std::vector<char>& scratch)
    : rank(rank), size(size), call(call), tunables(tunables), transport_(transport), links_(links),
      deadline_(deadline), start_(Clock::now()), scratch_(scratch) {
  for (Link* l : links_) {
    if (l != nullptr) active_.push_back(l);
  }
}

std::vector<int> Context::ringPeers() const {
  std::vector<int> peers;
  if (size > 1) peers.push_back(left());
  if (size > 2) peers.push_back(right());
  return peers;
}

void Context::postHeaders(const std::vector<int>& peers) {
  headerPeers_ = peers;
  theirs_.assign(peers.size(), WireHeader{});
  headerTickets_.assign(peers.size(), 0);
  for (int p : peers) link(p).postSend(&call, sizeof(call));
  for (size_t i = 0; i < peers.size(); ++i) {
    headerTickets_[i] = link(peers[i]).postRecv(&theirs_[i], sizeof(WireHeader));
  }
}

void Context::checkHeaders() {
  setStep("header exchange", 0, 1);
  for (size_t i = 0; i < headerPeers_.size(); ++i) {
    const int peer = headerPeers_[i];
    waitRecv(link(peer), headerTickets_[i]);
    const WireHeader& h = theirs_[i];
    if (h.magic != call.magic) {
      throw MismatchError("rank " + std::to_string(rank) + " expected a call header from rank " +
                          std::to_string(peer) + " for its " + describeCall(call) +
                          " but received unrelated bytes (the peer is out of step)");
    }
    bool same = h.kind == call.kind && h.dtype == call.dtype && h.redop == call.redop &&
                h.seq == call.seq && h.count == call.count && h.root == call.root &&
                h.algo == call.algo;
    if (!same) {
      throw MismatchError("mismatched collectives: rank " + std::to_string(rank) + " called " +
                          describeCall(call) + " as call #" + std::to_string(call.seq) +
                          " but rank " + std::to_string(h.rank) + " called " + describeCall(h) +
                          " as call #" + std::to_string(h.seq));
    }
  }
}

std::string Context::describeWait(const Link& l, const char* what) const {
  double waited = std::chrono::duration<double>(Clock::now() - start_).count();
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f", waited);
  return std::string(opKindName(static_cast<OpKind>(call.kind))) + " (call #" +
         std::to_string(call.seq) + ") on rank " + std::to_string(rank) + " timed out after " +
         buf + " s in " + phase_ + " step " + std::to_string(step_ + 1) + "/" +
         std::to_string(std::max(steps_, 1)) + " waiting to " + what + " rank " +
         std::to_string(l.peer());
}

void Context::wait(Link& l, const std::function<bool()>& done, const char* what) {
  waitUntil(transport_, done, deadline_, [&] { return describeWait(l, what); },
            std::chrono::microseconds(tunables.spinUs));
}

void Context::waitRecv(Link& l, uint64_t ticket) {
  if (l.received(ticket)) return;
  wait(l, [&] { return l.received(ticket); }, "receive from");
}

void Context::waitSend(Link& l, uint64_t ticket) {
  if (l.sent(ticket)) return;
  wait(l, [&] { return l.sent(ticket); }, "send to");
}

void Context::drainSends() {
  for (Link* l : active_) {
    if (!l->sendPending()) continue;
    wait(*l, [l] { return !l->sendPending(); }, "send to");
  }
}

char* Context::scratch(size_t bytes) {
  if (scratch_.size() < bytes) {
    scratch_.clear();
    scratch_.shrink_to_fit();
    scratch_.resize(bytes);
  }
  return scratch_.data();
}

}  // namespace pycollect
