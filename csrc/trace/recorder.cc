#include "trace/recorder.h"

#include <time.h>

namespace pycollect {
namespace trace {
namespace {
thread_local Recorder* tActive = nullptr;
}  // namespace

int64_t nowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

const char* eventTypeName(EventType t) {
  switch (t) {
    case EventType::kSendPosted: return "send_posted";
    case EventType::kSendDone: return "send_done";
    case EventType::kRecvPosted: return "recv_posted";
    case EventType::kRecvDone: return "recv_done";
    case EventType::kReduceStart: return "reduce_start";
    case EventType::kReduceEnd: return "reduce_end";
  }
  return "unknown";
}

#ifndef PYCOLLECT_NO_TRACE_HOOKS
Recorder* active() { return tActive; }
#endif

Recorder::Recorder(int worldSize, size_t capacity) : capacity_(capacity) {
  for (auto& byPeer : pending_) byPeer.resize(worldSize > 0 ? worldSize : 1);
}

Recorder::Scope::Scope(Recorder* recorder, uint8_t kind, uint64_t seq) : saved_(tActive) {
  tActive = recorder;
  if (recorder == nullptr) return;
  recorder->kind_ = kind;
  recorder->seq_ = seq;
  recorder->unit_ = Unit();
  for (auto& byPeer : recorder->pending_) {
    for (auto& q : byPeer) q.clear();  // left by a call that failed
  }
}

Recorder::Scope::~Scope() { tActive = saved_; }

Event Recorder::make(EventType t, int peer, uint64_t bytes) const {
  Event e;
  e.ns = nowNs();
  e.seq = seq_;
  e.bytes = bytes;
  e.unit = unit_;
  e.peer = peer;
  e.type = t;
  e.kind = kind_;
  return e;
}

void Recorder::push(const Event& e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() >= capacity_) {
    ++dropped_;
    return;
  }
  events_.push_back(e);
}

std::vector<Event> Recorder::take(uint64_t* dropped) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Event> out;
  out.swap(events_);
  if (dropped != nullptr) *dropped = dropped_;
  dropped_ = 0;
  return out;
}

void posted(Recorder& r, Direction d, int peer, uint64_t ticket, size_t bytes) {
  Event e = r.make(d == Direction::kSend ? EventType::kSendPosted : EventType::kRecvPosted, peer, bytes);
  r.push(e);
  auto& q = r.pending_[static_cast<int>(d)];
  if (peer >= 0 && static_cast<size_t>(peer) < q.size()) q[peer].push_back({ticket, e});
}

void completed(Recorder& r, Direction d, int peer, uint64_t doneTotal) {
  auto& byPeer = r.pending_[static_cast<int>(d)];
  if (peer < 0 || static_cast<size_t>(peer) >= byPeer.size()) return;
  auto& q = byPeer[peer];
  if (q.empty() || q.front().ticket >= doneTotal) return;
  const int64_t now = nowNs();
  while (!q.empty() && q.front().ticket < doneTotal) {
    Event e = q.front().posted;
    e.ns = now;
    e.type = d == Direction::kSend ? EventType::kSendDone : EventType::kRecvDone;
    r.push(e);
    q.pop_front();
  }
}

void setUnit(Recorder& r, const Unit& u) { r.unit_ = u; }

void reduceEvent(Recorder& r, EventType t, size_t bytes) { r.push(r.make(t, -1, bytes)); }

}  // namespace trace
}  // namespace pycollect
