#include "transport/wait.h"

#include <algorithm>

#include "common/error.h"

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
  for (;;) {
    // Optimistic pass: the link usually has room or data already.
    transport.progress();
    if (done()) return;
    if (!transport.busy()) {
      throw Error("internal error: waiting with nothing in flight (" + describe() + ")");
    }
    if (Clock::now() >= deadline) throw TimeoutError(describe());
    transport.waitReady(deadline);
    // Errors and hang-ups surface through the next progress().
  }
}

}  // namespace pycollect
