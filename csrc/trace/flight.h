// The flight recorder: each group keeps its last calls in a fixed ring, always on, so that
// when a call fails or times out every rank can say what it was doing (pycollect/flight.py
// writes the ring to a file; `pycollect flight DIR` reads the files of all ranks and
// names the rank that is behind).
//
// An entry is made when a call is issued (queued), marked when it starts running, then
// at each step the algorithm enters (Context::setStep) and each peer it waits for
// (Context's waits), and when it ends, done or failed. Nothing here allocates after the
// ring is made; issuing takes an uncontended lock, the start, the end, a step or a wait a
// few relaxed stores: well under a microsecond a call (measured: docs/traces.md). A
// snapshot may read an entry half-updated by its running call: it is a diagnostic.
//
// The ring is overwritten oldest first; a Mark whose entry was overwritten (more than
// `capacity` later calls issued while it was still queued) records nothing more.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"

namespace pycollect {
namespace flight {

// A time point of the engine's clock in microseconds of the system clock: the system clock
// read once (at the first record of the process), plus the steady clock since. So the
// clock read that starts a call's deadline also stamps its record (a read is some 25 ns,
// and a small call made five of them).
int64_t wallUs(Clock::time_point t);

enum class State : uint8_t { kQueued = 0, kRunning = 1, kDone = 2, kFailed = 3 };
const char* stateName(State s);

constexpr int kNoPeer = -1;   // waiting on nobody (yet)
constexpr int kAnyPeer = -2;  // a receive from any source

// What a call is, as issued.
struct Call {
  uint64_t seq = 0;      // collectives: the group's call number; send/recv: the message number
  uint8_t kind = 0;      // OpKind
  uint8_t dtype = 0;     // DType
  uint8_t algo = 0;      // Algo
  int32_t root = -1;     // rooted calls; send/recv: the tag
  uint64_t count = 0;    // elements
  int32_t peer = kNoPeer;  // send/recv: the other rank
  bool send = false;       // send/recv: this rank sends
};

// One entry as read back (snapshot): the call, its state, where it is, and its times
// in microseconds of the system clock (0: not yet).
struct Record {
  uint64_t id = 0;  // issue order within the group, from 0
  Call call;
  State state = State::kQueued;
  std::string phase;
  int32_t step = 0, steps = 0, waitingOn = kNoPeer;
  int64_t issuedUs = 0, startedUs = 0, endedUs = 0;
};

class Recorder;
struct Slot;

// A call's handle on its entry.
class Mark {
 public:
  Mark() = default;
  Mark(Recorder* r, Slot* slot, uint64_t id) : recorder_(r), slot_(slot), id_(id) {}
  void started(Clock::time_point now = Clock::now()) const;
  void numbered(uint64_t seq) const;  // a recv is numbered when it is posted
  void step(const char* phase, int step, int steps) const;
  void waiting(int peer) const;
  void ended(bool failed) const;

 private:
  // Its slot while the slot still holds its entry, else nullptr (overwritten, or off).
  Slot* mine() const;

  Recorder* recorder_ = nullptr;
  Slot* slot_ = nullptr;  // where its entry was made
  uint64_t id_ = 0;
};

// An entry of the ring. Written under the recorder's lock when issued, then by the thread
// that runs the call (relaxed stores), read by a snapshot under the lock.
struct Slot {
  std::atomic<uint64_t> id{UINT64_MAX};  // UINT64_MAX: never used
  Call call;
  std::atomic<State> state{State::kQueued};
  int64_t issuedUs = 0;
  std::atomic<int64_t> startedUs{0}, endedUs{0};
  std::atomic<const char*> phase{nullptr};
  std::atomic<int32_t> step{0}, steps{0}, waitingOn{kNoPeer};
};

class Recorder {
 public:
  explicit Recorder(size_t capacity);  // 0: off (nothing is recorded)
  Mark issued(const Call& call, Clock::time_point now = Clock::now());
  // Oldest first.
  std::vector<Record> snapshot() const;
  size_t capacity() const { return slots_.size(); }

 private:
  friend class Mark;
  void setSeq(Slot& s, uint64_t id, uint64_t seq);

  mutable std::mutex mu_;
  std::vector<Slot> slots_;
  uint64_t next_ = 0;  // under mu_
};

}  // namespace flight
}  // namespace pycollect
