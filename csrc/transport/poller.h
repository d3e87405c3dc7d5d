// Drives the links of a group until a condition holds. Every wait of the engine
// goes through here: it moves bytes on every link that has queued work (so a
// rank sends to its right neighbour while it receives from its left one), and it
// enforces the deadline.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "transport/link.h"

namespace pycollect {

// Returns once done() is true. Throws TimeoutError with describe() as its message
// if `deadline` passes first, and PeerLostError if a link fails.
void waitUntil(const std::vector<Link*>& links, const std::function<bool()>& done,
               Clock::time_point deadline, const std::function<std::string()>& describe);

}  // namespace pycollect
