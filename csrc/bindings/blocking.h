#pragma once
// The scope of a blocking call issued from Python (register_communicator.cc,
// register_fast_calls.cc).
#include "bindings/register.h"
#include "comm/communicator.h"
#include "common/interrupt.h"

namespace pycollect {

// A blocking call may run on this thread (InlineScope); while it does, long waits ask
// Python every 50 ms whether a signal handler wants to stop (interrupt.h).
struct Blocking {
  explicit Blocking(bool on) : inline_(on), checks_(on ? pythonSignalPending : nullptr) {}
  InlineScope inline_;
  interrupt::Scope checks_;
};

}  // namespace pycollect
