#include "comm/p2p.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/error.h"

namespace pycollect {
namespace {

std::string rankName(int peer) { return peer == kAnySource ? "any rank" : "rank " + std::to_string(peer); }

// "recv from rank 1 (count=4, float32, tag=0) on rank 0": an op as its messages name it.
std::string describe(const P2POp& op, int rank) {
  const std::string call = describeCall(op.call);  // "send/recv(count=4, float32, tag=0)"
  return std::string(op.send ? "send to " : "recv from ") + rankName(op.peer) + " " + call.substr(call.find('(')) +
         " on rank " + std::to_string(rank);
}

// memcpy, for any length: an empty message may come with no memory at all.
void copy(void* to, const void* from, size_t bytes) {
  if (bytes > 0) std::memcpy(to, from, bytes);
}

std::string seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

PointToPoint::PointToPoint(int rank, int size, P2POptions options)
    : rank_(rank), size_(size), options_(options), peers_(size) {
  for (Peer& p : peers_) p.credit = options_.creditBytes;
}

void PointToPoint::setLinks(std::vector<Link*> links) {
  for (int p = 0; p < size_; ++p) peers_[p].link = links[p];
}

void PointToPoint::post(std::unique_ptr<P2POp> owned) {
  P2POp* op = owned.get();
  op->slot = ops_.size();
  ops_.push_back(std::move(owned));
  nextDeadline_ = std::min(nextDeadline_, op->deadline);
  op->work->flight().started();
  if (op->send) {
    op->work->flight().waiting(op->peer);
    sendMessage(*op);
    return;
  }
  op->work->flight().waiting(op->peer == kAnySource ? flight::kAnyPeer : op->peer);
  auto u = findUnexpected(*op);
  if (u != unexpected_.end()) {
    takeUnexpected(*op, u);
    finishCompleted();
    return;
  }
  posted_.push_back(op);
  if (op->peer != kAnySource) {
    ++peers_[op->peer].postedFrom;
    readFrom(op->peer);
    return;
  }
  ++postedAny_;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) readFrom(p);
  }
}

void PointToPoint::sendMessage(P2POp& s) {
  Peer& p = peers_[s.peer];
  Frame& f = s.frame;
  f.tag = s.tag;
  f.bytes = s.bytes;
  f.id = s.id;
  if (s.bytes > options_.eagerBytes || p.credit < charge(s.bytes)) {
    // Rendezvous: the payload moves once the receiver matched the message and said Go.
    f.kind = static_cast<uint8_t>(FrameKind::kReady);
    p.link->postSend(&f, sizeof(Frame));
    p.awaitingGo.emplace(s.id, &s);
    readFrom(s.peer);
    return;
  }
  p.credit -= charge(s.bytes);
  f.kind = static_cast<uint8_t>(FrameKind::kEager);
  const bool inlined = s.bytes <= kInlineBytes;
  if (inlined) copy(f.inlined, s.data, s.bytes);
  uint64_t last = p.link->postSend(&f, sizeof(Frame));
  if (!inlined) last = p.link->postSend(s.data, s.bytes);
  p.sending.push_back({last, &s});
  activate(s.peer);
}

bool PointToPoint::poll(Clock::time_point now, bool checkDeadlines) {
  if (active_.empty() && ops_.empty()) return false;  // the common case inside a collective's waits
  bool read = false;
  for (size_t i = 0; i < active_.size(); ++i) {
    const int from = active_[i];
    Peer& p = peers_[from];
    while (!p.sending.empty() && p.link->sent(p.sending.front().ticket)) {
      P2POp* op = p.sending.front().op;
      p.sending.pop_front();
      if (op != nullptr) {
        done(op);
      } else {
        p.answers.pop_front();
      }
    }
    while (!p.landing.empty() && p.link->received(p.landing.front().ticket)) {
      Landing l = p.landing.front();
      p.landing.pop_front();
      land(l);
    }
    if (p.reading && p.link->received(p.frameTicket)) {
      p.reading = false;
      handle(from);
      readFrom(from);
      read = true;
    }
  }
  // Peers with nothing left in flight leave the list (their stale entries are skipped).
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [this](int p) {
                                 Peer& peer = peers_[p];
                                 peer.listed = peer.reading || !peer.sending.empty() || !peer.landing.empty();
                                 return !peer.listed;
                               }),
                active_.end());
  if (checkDeadlines && now >= nextDeadline_) this->checkDeadlines(now);
  finishCompleted();
  return read;
}

void PointToPoint::land(const Landing& l) {
  if (l.recv != nullptr) {
    done(l.recv);
    return;
  }
  Unexpected& u = *l.unexpected;
  u.arrived = true;
  if (u.claimedBy == nullptr) return;
  P2POp* r = u.claimedBy;
  copy(r->data, u.data.data(), u.bytes);
  unexpected_.erase(l.unexpected);
  done(r);
}

void PointToPoint::handle(int from) {
  Peer& p = peers_[from];
  const Frame& f = p.frame;
  if (f.magic != Frame::kMagic) {
    throw MismatchError("rank " + std::to_string(rank_) + " received bytes from rank " + std::to_string(from) +
                        " that are not a point-to-point frame (the two ranks are out of step)");
  }
  switch (static_cast<FrameKind>(f.kind)) {
    case FrameKind::kEager:
    case FrameKind::kReady: {
      const bool eager = f.kind == static_cast<uint8_t>(FrameKind::kEager);
      auto it = findPosted(from, f.tag);
      if (it == posted_.end()) {
        Unexpected& u = unexpected_.emplace_back(Unexpected{from, f.tag, f.id, f.bytes, eager, !eager, {}, nullptr});
        if (!eager) return;
        u.data.resize(f.bytes);
        if (f.bytes <= kInlineBytes) {
          copy(u.data.data(), f.inlined, f.bytes);
          u.arrived = true;
          return;
        }
        p.landing.push_back({p.link->postRecv(u.data.data(), f.bytes), nullptr, std::prev(unexpected_.end())});
        return;
      }
      P2POp* r = *it;
      unpost(it);
      matched(*r, from, f.id, f.bytes);
      if (!eager) {
        answer(from, FrameKind::kGo, f.id);
        p.awaitingData.emplace(f.id, r);
        return;
      }
      owe(from, charge(f.bytes));
      if (f.bytes <= kInlineBytes) {
        copy(r->data, f.inlined, f.bytes);
        done(r);
        return;
      }
      p.landing.push_back({p.link->postRecv(r->data, f.bytes), r, {}});
      return;
    }
    case FrameKind::kGo: {
      p.credit += f.bytes;
      auto it = p.awaitingGo.find(f.id);
      if (it == p.awaitingGo.end()) break;
      P2POp* s = it->second;
      p.awaitingGo.erase(it);
      s->frame.kind = static_cast<uint8_t>(FrameKind::kData);  // the Ready frame has left: reused
      uint64_t last = p.link->postSend(&s->frame, sizeof(Frame));
      if (s->bytes > 0) last = p.link->postSend(s->data, s->bytes);
      p.sending.push_back({last, s});
      return;
    }
    case FrameKind::kData: {
      auto it = p.awaitingData.find(f.id);
      if (it == p.awaitingData.end()) break;
      P2POp* r = it->second;
      p.awaitingData.erase(it);
      if (r->got == 0) {
        done(r);
        return;
      }
      p.landing.push_back({p.link->postRecv(r->data, r->got), r, {}});
      return;
    }
    case FrameKind::kCredit:
      p.credit += f.bytes;
      return;
  }
  throw MismatchError("rank " + std::to_string(rank_) + " received a point-to-point frame from rank " +
                      std::to_string(from) + " that answers nothing it sent (kind " + std::to_string(f.kind) +
                      ", message #" + std::to_string(f.id) + "): the two ranks are out of step");
}

std::vector<P2POp*>::iterator PointToPoint::findPosted(int from, int tag) {
  return std::find_if(posted_.begin(), posted_.end(), [&](const P2POp* r) {
    return (r->peer == from || r->peer == kAnySource) && r->tag == tag;
  });
}

PointToPoint::UnexpectedIt PointToPoint::findUnexpected(const P2POp& r) {
  return std::find_if(unexpected_.begin(), unexpected_.end(), [&](const Unexpected& u) {
    return u.claimedBy == nullptr && (r.peer == kAnySource || r.peer == u.from) && u.tag == r.tag;
  });
}

void PointToPoint::unpost(std::vector<P2POp*>::iterator it) {
  const int peer = (*it)->peer;
  posted_.erase(it);
  if (peer != kAnySource) {
    --peers_[peer].postedFrom;
    unread(peer);
    return;
  }
  // The other peers' frames were read for this receive only: a peer that never sends again
  // (or leaves) must not keep a read posted on its link.
  if (--postedAny_ == 0) {
    for (int p = 0; p < size_; ++p) unread(p);
  }
}

void PointToPoint::matched(P2POp& r, int from, uint64_t id, size_t bytes) {
  if (bytes > r.bytes) {
    failOp(&r, std::make_exception_ptr(MismatchError(
                   describe(r, rank_) + " has room for " + std::to_string(r.bytes) +
                   " bytes, but the message with tag " + std::to_string(r.tag) + " it matched, rank " +
                   std::to_string(from) + "'s message #" + std::to_string(id) + ", has " + std::to_string(bytes) +
                   " bytes: a receive must be at least as large as its message")));
  }
  r.from = from;
  r.id = id;
  r.got = bytes;
  r.work->flight().numbered(id);
}

void PointToPoint::takeUnexpected(P2POp& r, UnexpectedIt u) {
  matched(r, u->from, u->id, u->bytes);
  if (!u->eager) {
    answer(u->from, FrameKind::kGo, u->id);
    peers_[u->from].awaitingData.emplace(u->id, &r);
    readFrom(u->from);
    unexpected_.erase(u);
    return;
  }
  owe(u->from, charge(u->bytes));
  if (!u->arrived) {
    u->claimedBy = &r;  // completed when its payload lands
    return;
  }
  copy(r.data, u->data.data(), u->bytes);
  unexpected_.erase(u);
  done(&r);
}

void PointToPoint::owe(int to, size_t bytes) {
  Peer& p = peers_[to];
  p.owed += bytes;
  if (p.owed >= options_.creditBytes / 2) answer(to, FrameKind::kCredit, 0);
}

void PointToPoint::answer(int to, FrameKind kind, uint64_t id) {
  Peer& p = peers_[to];
  Frame& f = p.answers.emplace_back();
  f.kind = static_cast<uint8_t>(kind);
  f.id = id;
  f.bytes = p.owed;  // every answer gives back the credit owed
  p.owed = 0;
  p.sending.push_back({p.link->postSend(&f, sizeof(Frame)), nullptr});
  activate(to);
}

bool PointToPoint::interested(int peer) const {
  const Peer& p = peers_[peer];
  return postedAny_ > 0 || p.postedFrom > 0 || !p.awaitingGo.empty() || !p.awaitingData.empty();
}

void PointToPoint::readFrom(int peer) {
  Peer& p = peers_[peer];
  if (p.reading || !interested(peer)) return;
  p.frameTicket = p.link->postRecv(&p.frame, sizeof(Frame));
  p.reading = true;
  activate(peer);
}

void PointToPoint::unread(int peer) {
  Peer& p = peers_[peer];
  if (p.reading && !interested(peer) && p.link->withdrawRecv(p.frameTicket, sizeof(Frame))) p.reading = false;
}

void PointToPoint::activate(int peer) {
  Peer& p = peers_[peer];
  if (p.listed) return;
  p.listed = true;
  active_.push_back(peer);
}

void PointToPoint::done(P2POp* op, std::exception_ptr error) {
  const size_t slot = op->slot;
  completed_.emplace_back(std::move(ops_[slot]), error);
  if (slot + 1 != ops_.size()) {  // the last one takes its place
    ops_[slot] = std::move(ops_.back());
    ops_[slot]->slot = slot;
  }
  ops_.pop_back();
}

void PointToPoint::failOp(P2POp* op, std::exception_ptr error) {
  done(op, error);
  finishCompleted();
  std::rethrow_exception(error);
}

void PointToPoint::finishCompleted() {
  // Taken out of completed_ first: a hook may post more (Communicator::enqueue, from a
  // completion), which completes into completed_ and is finished by that post's own call.
  if (completed_.empty()) return;
  Completed batch;
  batch.swap(finishing_);  // its spare capacity goes to completed_ below
  batch.swap(completed_);
  for (auto& [op, error] : batch) {
    if (!op->send && !error) {
      static_cast<RecvWork&>(*op->work).setReceived(op->from, op->got);
      if (op->sourceOut != nullptr) *op->sourceOut = op->from;
    }
    if (deferHooks_) {
      op->work->finishDeferred(error);
      deferred_.push_back(op->work);
    } else {
      op->work->finish(error);
    }
  }
  batch.clear();
  if (finishing_.capacity() < batch.capacity()) finishing_.swap(batch);
}

std::vector<std::shared_ptr<Work>> PointToPoint::takeDeferred() {
  auto out = std::move(deferred_);
  deferred_.clear();
  return out;
}

Clock::time_point PointToPoint::nextDeadline() const { return nextDeadline_; }

void PointToPoint::checkDeadlines(Clock::time_point now) {
  nextDeadline_ = Clock::time_point::max();
  for (auto& op : ops_) {
    if (now <= op->deadline) {
      nextDeadline_ = std::min(nextDeadline_, op->deadline);
      continue;
    }
    const Peer* p = op->peer == kAnySource ? nullptr : &peers_[op->peer];
    std::string why;
    if (op->send) {
      why = p->awaitingGo.count(op->id) ? rankName(op->peer) + " to post a receive that matches it"
                                        : "its bytes to leave for " + rankName(op->peer);
    } else if (op->from < 0) {
      why = "a message with tag " + std::to_string(op->tag) + " from " + rankName(op->peer);
      if (op->peer == kAnySource) why += " (" + others() + ")";
    } else {
      why = "the rest of rank " + std::to_string(op->from) + "'s message #" + std::to_string(op->id);
    }
    failOp(op.get(), std::make_exception_ptr(TimeoutError(
                    describe(*op, rank_) + " timed out after " + seconds(now - op->posted) + " s waiting for " + why)));
  }
}

std::string PointToPoint::others() const {
  constexpr int kNamed = 8;  // a larger group's timeout names the first few
  std::string out;
  int named = 0;
  for (int p = 0; p < size_ && named < kNamed; ++p) {
    if (p == rank_) continue;
    out += (out.empty() ? "rank " : " or rank ") + std::to_string(p);
    ++named;
  }
  if (size_ - 1 > kNamed) out += " or " + std::to_string(size_ - 1 - kNamed) + " more";
  return out;
}

void PointToPoint::failAll(const std::string& reason) {
  auto ops = std::move(ops_);
  ops_.clear();
  posted_.clear();
  postedAny_ = 0;
  unexpected_.clear();
  active_.clear();
  for (Peer& p : peers_) {
    Link* link = p.link;
    p = Peer();
    p.link = link;
    p.credit = options_.creditBytes;
  }
  nextDeadline_ = Clock::time_point::max();
  for (auto& op : ops) {
    auto error = std::make_exception_ptr(GroupFailedError(op->work->what() + " did not complete: " + reason));
    if (deferHooks_) {
      op->work->finishDeferred(error);
      deferred_.push_back(op->work);
    } else {
      op->work->finish(error);
    }
  }
}

}  // namespace pycollect
