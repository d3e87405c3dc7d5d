// Drives a transport until a condition holds. Every wait of a collective goes
// through here: it moves bytes on every link that has queued work (so a rank
// sends to its right neighbour while it receives from its left one), and it
// enforces the deadline.
#pragma once

#include <functional>
#include <string>

#include "common/clock.h"
#include "transport/transport.h"

namespace pycollect {

// Returns once done() is true. Throws TimeoutError with describe() as its message
// if `deadline` passes first, and PeerLostError if a link fails. For `spin` it polls
// without sleeping: a peer that answers within microseconds is seen within
// microseconds, where a sleep in poll(2) costs a wake-up of tens of them.
void waitUntil(Transport& transport, const std::function<bool()>& done,
               Clock::time_point deadline, const std::function<std::string()>& describe,
               std::chrono::microseconds spin = std::chrono::microseconds(0));

}  // namespace pycollect
