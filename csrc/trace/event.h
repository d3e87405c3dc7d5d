// One trace event: what the engine did, when, and for which part of which call.
// Timestamps are CLOCK_MONOTONIC nanoseconds: one clock for every process of the
// machine (network-namespace hosts included), so ranks' events line up as recorded.
#pragma once

#include <cstdint>

namespace pycollect {
namespace trace {

enum class EventType : uint8_t {
  kSendPosted = 0,
  kSendDone = 1,   // the transport has the bytes out of the caller's buffer
  kRecvPosted = 2,
  kRecvDone = 3,   // the bytes are in the caller's buffer
  kReduceStart = 4,
  kReduceEnd = 5,
};

// Which part of the algorithm an event belongs to, as the algorithm names it
// (Context::setStep / setUnit). chunk and segment are -1 where the algorithm did
// not say.
struct Unit {
  const char* phase = "start";  // a string literal of the algorithm (never freed)
  int32_t step = 0;
  int32_t chunk = -1;
  int32_t segment = -1;
};

struct Event {
  int64_t ns = 0;      // CLOCK_MONOTONIC
  uint64_t seq = 0;    // the call's sequence number in its group
  uint64_t bytes = 0;
  Unit unit;
  int32_t peer = -1;   // -1 for reductions
  EventType type = EventType::kSendPosted;
  uint8_t kind = 0;    // OpKind of the call
};

int64_t nowNs();  // CLOCK_MONOTONIC
const char* eventTypeName(EventType t);

}  // namespace trace
}  // namespace pycollect
