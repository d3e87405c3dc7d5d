// The wire's own limit for small messages, measured without the engine: an 8-byte
// ping-pong between two threads over loopback TCP (TCP_NODELAY), with blocking
// receives (the receiver sleeps in the kernel and is woken) or busy-polling ones
// (MSG_DONTWAIT in a loop: no wake-up at all). The benchmark prints it beside the
// engine's small-message latency as the floor a TCP transport can approach.
#pragma once

namespace pycollect {
namespace tcp {

// Median round-trip time in microseconds over `iters` round trips (after a warm-up).
double pingPongRoundTripUs(int iters, bool busyPoll);

}  // namespace tcp
}  // namespace pycollect
