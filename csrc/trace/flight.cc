#include "trace/flight.h"

#include <chrono>

namespace pycollect {
namespace flight {
int64_t wallUs(Clock::time_point t) {
  using std::chrono::microseconds;
  static const int64_t offsetUs = [] {
    const auto wall = std::chrono::system_clock::now();
    const auto steady = Clock::now();
    return std::chrono::duration_cast<microseconds>(wall.time_since_epoch()).count() -
           std::chrono::duration_cast<microseconds>(steady.time_since_epoch()).count();
  }();
  return offsetUs + std::chrono::duration_cast<microseconds>(t.time_since_epoch()).count();
}

const char* stateName(State s) {
  switch (s) {
    case State::kQueued: return "queued";
    case State::kRunning: return "running";
    case State::kDone: return "done";
    case State::kFailed: return "failed";
  }
  return "?";
}

Recorder::Recorder(size_t capacity) : slots_(capacity) {}

Mark Recorder::issued(const Call& call, Clock::time_point now) {
  if (slots_.empty()) return Mark();  // off
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = next_++;
  Slot& s = slots_[id % slots_.size()];
  s.id.store(id, std::memory_order_relaxed);
  s.call = call;
  s.state.store(State::kQueued, std::memory_order_relaxed);
  s.issuedUs = wallUs(now);
  s.startedUs.store(0, std::memory_order_relaxed);
  s.endedUs.store(0, std::memory_order_relaxed);
  s.phase.store(nullptr, std::memory_order_relaxed);
  s.step.store(0, std::memory_order_relaxed);
  s.steps.store(0, std::memory_order_relaxed);
  s.waitingOn.store(call.send || call.peer == kNoPeer ? kNoPeer : call.peer, std::memory_order_relaxed);
  return Mark(this, &s, id);
}

void Recorder::setSeq(Slot& s, uint64_t id, uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  if (s.id.load(std::memory_order_relaxed) == id) s.call.seq = seq;
}

std::vector<Record> Recorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Record> out;
  if (slots_.empty()) return out;
  uint64_t first = next_ > slots_.size() ? next_ - slots_.size() : 0;
  for (uint64_t id = first; id < next_; ++id) {
    const Slot& s = slots_[id % slots_.size()];
    Record r;
    r.id = s.id.load(std::memory_order_relaxed);
    r.call = s.call;
    r.state = s.state.load(std::memory_order_relaxed);
    const char* phase = s.phase.load(std::memory_order_relaxed);
    r.phase = phase != nullptr ? phase : "";
    r.step = s.step.load(std::memory_order_relaxed);
    r.steps = s.steps.load(std::memory_order_relaxed);
    r.waitingOn = s.waitingOn.load(std::memory_order_relaxed);
    r.issuedUs = s.issuedUs;
    r.startedUs = s.startedUs.load(std::memory_order_relaxed);
    r.endedUs = s.endedUs.load(std::memory_order_relaxed);
    out.push_back(std::move(r));
  }
  return out;
}

// The running call's own slot, written without the lock: each field is atomic, and an
// entry overwritten meanwhile (its slot reused by a call issued a whole ring later) only
// loses a diagnostic.
Slot* Mark::mine() const {
  return slot_ != nullptr && slot_->id.load(std::memory_order_relaxed) == id_ ? slot_ : nullptr;
}

void Mark::started(Clock::time_point now) const {
  if (Slot* s = mine()) {
    s->startedUs.store(wallUs(now), std::memory_order_relaxed);
    s->state.store(State::kRunning, std::memory_order_relaxed);
  }
}

void Mark::numbered(uint64_t seq) const {
  if (slot_ != nullptr) recorder_->setSeq(*slot_, id_, seq);
}

void Mark::ended(bool failed) const {
  if (Slot* s = mine()) {
    s->endedUs.store(wallUs(Clock::now()), std::memory_order_relaxed);
    s->state.store(failed ? State::kFailed : State::kDone, std::memory_order_relaxed);
  }
}

void Mark::step(const char* phase, int step, int steps) const {
  if (Slot* s = mine()) {
    s->phase.store(phase, std::memory_order_relaxed);
    s->step.store(step, std::memory_order_relaxed);
    s->steps.store(steps, std::memory_order_relaxed);
  }
}

void Mark::waiting(int peer) const {
  if (Slot* s = mine()) s->waitingOn.store(peer, std::memory_order_relaxed);
}

}  // namespace flight
}  // namespace pycollect
