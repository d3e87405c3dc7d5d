#include "transport/wait.h"

#include "common/error.h"

namespace pycollect {

void waitUntil(Transport& transport, const std::function<bool()>& done,
               Clock::time_point deadline, const std::function<std::string()>& describe) {
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
