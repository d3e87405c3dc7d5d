#include "transport/wait.h"

#include <algorithm>

#include "common/error.h"
#include "common/interrupt.h"

namespace pycollect {

void waitUntil(Transport& transport, const std::function<bool()>& done,
               Clock::time_point deadline, const std::function<std::string()>& describe,
               std::chrono::microseconds spin) {
  if (spin.count() > 0) {
    auto until = std::min(deadline, Clock::now() + spin);
    do {
      transport.progress();
      if (done()) return;
    } while (Clock::now() < until);
  }
  // On a thread that runs the host program too, sleep in slices and ask it between them.
  const bool checks = interrupt::installed();
  auto nextCheck = Clock::now() + interrupt::kCheckEvery;
  for (;;) {
    // Optimistic pass: the link usually has room or data already.
    transport.progress();
    if (done()) return;
    if (!transport.busy()) {
      throw Error("internal error: waiting with nothing in flight (" + describe() + ")");
    }
    auto now = Clock::now();
    if (now >= deadline) throw TimeoutError(describe());
    if (checks && now >= nextCheck) {
      if (interrupt::requested()) {
        throw Interrupted("interrupted by the program's signal handler (e.g. Ctrl-C, KeyboardInterrupt) "
                          "while waiting: " + describe());
      }
      nextCheck = now + interrupt::kCheckEvery;
    }
    transport.waitReady(checks ? std::min(deadline, nextCheck) : deadline);
    // Errors and hang-ups surface through the next progress().
  }
}

}  // namespace pycollect
