// Where the engine reports to the trace recorder. Every hook starts with one test:
// is a recorder active on this thread? With tracing off that test is the whole cost.
//
// The recorder is thread-local and set only while a traced collective runs
// (Recorder::Scope), on the thread that drives the links: Link::postSend/postRecv,
// the transports' completion counters, reduce() and Context::setStep/setUnit all run
// there, so algorithms get their events without code of their own.
#pragma once

#include <cstddef>
#include <cstdint>

#include "trace/event.h"

namespace pycollect {
namespace trace {

class Recorder;

// The recorder of the collective running on this thread, or nullptr (tracing off).
// Built with PYCOLLECT_TRACE_HOOKS=OFF (CMake) it is always nullptr, known at compile
// time, so every hook is compiled away: that build exists to measure what the hooks
// cost when tracing is off (bench/trace_overhead.sh), and cannot trace.
#ifdef PYCOLLECT_NO_TRACE_HOOKS
inline constexpr bool kHooks = false;
inline Recorder* active() { return nullptr; }
#else
inline constexpr bool kHooks = true;
Recorder* active();
#endif

enum class Direction : uint8_t { kSend = 0, kRecv = 1 };

// A range was queued on the link to `peer` with this ticket.
void posted(Recorder& r, Direction d, int peer, uint64_t ticket, size_t bytes);
// The link to `peer` has completed every ticket below `doneTotal` in direction d.
void completed(Recorder& r, Direction d, int peer, uint64_t doneTotal);
// The current unit (phase, step, chunk, segment) of this thread's traced call.
void setUnit(Recorder& r, const Unit& u);
void reduceEvent(Recorder& r, EventType t, size_t bytes);

// Marks a reduction's start and end (reduce/reduce.cc).
class ReduceSpan {
 public:
  explicit ReduceSpan(size_t bytes) : r_(active()), bytes_(bytes) {
    if (r_ != nullptr) reduceEvent(*r_, EventType::kReduceStart, bytes_);
  }
  ~ReduceSpan() {
    if (r_ != nullptr) reduceEvent(*r_, EventType::kReduceEnd, bytes_);
  }
  ReduceSpan(const ReduceSpan&) = delete;
  ReduceSpan& operator=(const ReduceSpan&) = delete;

 private:
  Recorder* r_;
  size_t bytes_;
};

}  // namespace trace
}  // namespace pycollect
