#include "collectives/context.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <set>

#include "collectives/shared_arena.h"
#include "common/error.h"
#include "transport/wait.h"

namespace pycollect {

std::string describeCall(const WireHeader& h) {
  auto kind = static_cast<OpKind>(h.kind);
  std::string s = opKindName(kind);
  s += "(count=" + std::to_string(h.count);
  if (kind != OpKind::kBarrier) s += std::string(", ") + dtypeName(static_cast<DType>(h.dtype));
  const bool reduces = kind == OpKind::kAllReduce || kind == OpKind::kReduceScatter ||
                       kind == OpKind::kReduce || kind == OpKind::kAllReduceCoalesced;
  if (reduces) s += std::string(", ") + reduceOpName(static_cast<ReduceOp>(h.redop));
  if (kind == OpKind::kBroadcast || kind == OpKind::kReduce || kind == OpKind::kGather ||
      kind == OpKind::kScatter) {
    s += ", root=" + std::to_string(h.root);
  }
  if (kind == OpKind::kSend) s += ", tag=" + std::to_string(h.root);
  if (kind == OpKind::kAllReduce && h.root > 0 && h.root < kNumCompress) {
    s += std::string(", compress=") + compressName(static_cast<Compress>(h.root));
  }
  if (kind == OpKind::kAllReduceCoalesced || kind == OpKind::kAllGatherCoalesced) {
    s += ", tensors=" + std::to_string(h.root);
  }
  auto algo = static_cast<Algo>(h.algo);
  const bool chooses = kind == OpKind::kAllReduce || kind == OpKind::kAllReduceCoalesced ||
                       kind == OpKind::kAllGather || kind == OpKind::kAllGatherCoalesced ||
                       kind == OpKind::kReduceScatter || kind == OpKind::kBroadcast;
  if (chooses && algo != Algo::kAuto) s += std::string(", ") + algoName(algo);
  s += ")";
  return s;
}

Context::Context(int rank, int size, Transport& transport, const std::vector<Link*>& links,
                 Background* messages, const WireHeader& call, Clock::time_point deadline,
                 Clock::time_point start, const Tunables& tunables, std::vector<char>& scratch)
    : rank(rank), size(size), call(call), tunables(tunables), transport_(transport), messages_(messages),
      links_(&links), deadline_(deadline), start_(start), scratch_(scratch), groupRank_(rank) {}

namespace {

int indexIn(const std::vector<int>& ranks, int rank) {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  if (it == ranks.end()) throw Error("a view of ranks that leaves out this rank " + std::to_string(rank));
  return static_cast<int>(it - ranks.begin());
}

}  // namespace

Context::Context(const Context& parent, const std::vector<int>& ranks, const char* level)
    : rank(indexIn(ranks, parent.rank)), size(static_cast<int>(ranks.size())), call(parent.call),
      tunables(parent.tunables), transport_(parent.transport_), messages_(parent.messages_), links_(&viewLinks_),
      deadline_(parent.deadline_), start_(parent.start_), scratch_(parent.scratch_), flight_(parent.flight_),
      groupRank_(parent.groupRank_), level_(level) {
  viewLinks_.reserve(ranks.size());
  for (int r : ranks) viewLinks_.push_back((*parent.links_)[r]);
}

const char* Context::named(const char* phase) {
  if (level_ == nullptr) return phase;
  if (phase != lastPhase_) {
    static std::mutex mu;
    static std::set<std::string> names;  // never shrinks: a few per algorithm and level
    std::lock_guard<std::mutex> lock(mu);
    lastNamed_ = names.insert(std::string(level_) + " " + phase).first->c_str();
    lastPhase_ = phase;
  }
  return lastNamed_;
}

const Hierarchy& Context::hierarchy() const {
  if (hierarchy_ == nullptr) throw Error("a hierarchical algorithm ran without the group's hosts");
  return *hierarchy_;
}

char* Context::stage(size_t bytes) {
  if (stage_ == nullptr) throw Error("a hierarchical algorithm ran without its stage buffer");
  if (stage_->size() < bytes) {
    stage_->clear();
    stage_->shrink_to_fit();
    stage_->resize(bytes);
  }
  return stage_->data();
}

std::vector<int> Context::ringPeers() const {
  std::vector<int> peers;
  if (size > 1) peers.push_back(left());
  if (size > 2) peers.push_back(right());
  return peers;
}

void Context::postHeaders(const std::vector<int>& peers, const std::vector<uint64_t>* sendCounts) {
  if (level_ != nullptr) return;  // a view: the call checked every header
  headerPeers_ = peers;
  setUnit("header", 0, -1, -1);
  ours_.assign(peers.size(), call);
  theirs_.clear();
  theirs_.resize(peers.size());  // not moved again: receives land in place
  for (size_t i = 0; i < peers.size(); ++i) {
    if (sendCounts != nullptr) ours_[i].count = (*sendCounts)[i];
    link(peers[i]).postSend(&ours_[i], sizeof(WireHeader));
  }
  for (size_t i = 0; i < peers.size(); ++i) {
    theirs_[i].ticket = link(peers[i]).postRecv(&theirs_[i].header, sizeof(WireHeader));
  }
}

void Context::checkHeaders(const std::vector<uint64_t>* recvCounts) {
  if (level_ != nullptr) return;
  setStep("header exchange", 0, 1);
  // Where the group has a shared arena, a peer that runs this call on it announces it there
  // and sends nothing on the link: its announcement is looked at while the header waits.
  SharedArena* a = recvCounts == nullptr ? arena() : nullptr;
  if (a != nullptr && !a->ready()) a = nullptr;
  for (size_t i = 0; i < headerPeers_.size(); ++i) {
    try {
      Link& l = link(headerPeers_[i]);
      const uint64_t t = theirs_[i].ticket;
      if (a == nullptr || l.received(t)) {
        waitRecv(l, t);
      } else {
        wait(l, [&] {
          a->checkAnnounced(call, headerPeers_[i]);
          return l.received(t);
        }, "receive from");
      }
    } catch (const PeerLostError&) {
      // A peer that saw nothing wrong may finish the call and leave before this rank reads
      // every header (an all-to-all's sender, whose receiver alone checks the counts): a
      // disagreement in a header that arrived before it left is the cause, so it is named.
      for (size_t j = i + 1; j < headerPeers_.size(); ++j) {
        if (link(headerPeers_[j]).received(theirs_[j].ticket)) checkHeader(j, recvCounts);
      }
      throw;
    }
    checkHeader(i, recvCounts);
  }
}

void Context::checkHeader(size_t i, const std::vector<uint64_t>* recvCounts) {
  const int peer = headerPeers_[i];
  const WireHeader& h = theirs_[i].header;
  WireHeader want = call;
  if (recvCounts != nullptr) want.count = (*recvCounts)[i];
  checkPeerHeader(want, h, groupRank_, peer);
}

void checkPeerHeader(const WireHeader& want, const WireHeader& h, int rank, int peer) {
  if (h.magic != want.magic) {
    throw MismatchError("rank " + std::to_string(rank) + " expected a call header from rank " +
                        std::to_string(peer) + " for its " + describeCall(want) +
                        " but received unrelated bytes (the peer is out of step)");
  }
  checkSameCall(want, h, rank);
}

bool sameCall(const WireHeader& want, const WireHeader& h) {
  return h.kind == want.kind && h.dtype == want.dtype && h.redop == want.redop && h.seq == want.seq &&
         h.count == want.count && h.root == want.root && h.algo == want.algo;
}

void checkSameCall(const WireHeader& want, const WireHeader& h, int rank) {
  if (!sameCall(want, h)) {
    throw MismatchError("mismatched collectives: rank " + std::to_string(rank) + " called " +
                        describeCall(want) + " as call #" + std::to_string(want.seq) +
                        " but rank " + std::to_string(h.rank) + " called " + describeCall(h) +
                        " as call #" + std::to_string(h.seq));
  }
}

std::string Context::timedOut() const {
  double waited = std::chrono::duration<double>(Clock::now() - start_).count();
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f", waited);
  return std::string(opKindName(static_cast<OpKind>(call.kind))) + " (call #" +
         std::to_string(call.seq) + ") on rank " + std::to_string(groupRank_) + " timed out after " +
         buf + " s";
}

std::string Context::stepText() const {
  return std::string(" in ") + phase_ + " step " + std::to_string(step_ + 1) + "/" + std::to_string(std::max(steps_, 1));
}

std::string Context::describeWait(const Link& l, const char* what) const {
  return timedOut() + stepText() + " waiting to " + what + " rank " + std::to_string(l.peer());
}

void Context::until(const std::function<bool()>& done, const std::function<std::string()>& describe,
                    std::chrono::microseconds spin) {
  if (background_ == nullptr && messages_ == nullptr) return waitUntil(transport_, done, deadline_, describe, spin);
  auto polled = [&] {
    if (messages_ != nullptr) messages_->poll();
    if (background_ != nullptr) background_->poll();
    return done();
  };
  waitUntil(transport_, polled, deadline_, describe, spin);
}

void Context::wait(Link& l, const std::function<bool()>& done, const char* what) {
  if (flight_ != nullptr) flight_->waiting(l.peer());
  until(done, [&] { return describeWait(l, what); }, std::chrono::microseconds(tunables.spinUs));
}

void Context::waitFor(const std::function<bool()>& done, const std::string& what) {
  waitFor(done, [&] { return what; });
}

void Context::waitFor(const std::function<bool()>& done, const std::function<std::string()>& what, int peer) {
  if (done()) return;
  if (flight_ != nullptr) flight_->waiting(peer);
  until(done, [&] { return timedOut() + " waiting to " + what(); }, std::chrono::microseconds(0));
}

std::vector<uint64_t> Context::postRecvs(const std::vector<int>& peers, const std::vector<Span>& spans,
                                         size_t elemBytes) {
  std::vector<uint64_t> tickets;
  for (int p : peers) tickets.push_back(link(p).postRecv(spans[p].data, spans[p].count * elemBytes));
  return tickets;
}

void Context::waitRecvs(const std::vector<int>& peers, const std::vector<uint64_t>& tickets,
                        const char* phase) {
  for (size_t i = 0; i < peers.size(); ++i) {
    setStep(phase, static_cast<int>(i), static_cast<int>(peers.size()));
    waitRecv(link(peers[i]), tickets[i]);
  }
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
  for (Link* l : *links_) {
    if (l == nullptr || !l->sendPending()) continue;
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
