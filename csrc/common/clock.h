// The engine's one clock: every deadline is a steady_clock time point.
#pragma once

#include <chrono>

namespace pycollect {

using Clock = std::chrono::steady_clock;

}  // namespace pycollect
