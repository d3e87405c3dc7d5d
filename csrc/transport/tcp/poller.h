// Waits until a TCP link with queued work can move bytes, or until someone wakes
// the worker. The poller owns the wake-up eventfd, so wake() is safe from any
// thread; a wake is consumed by the wait it ends.
#pragma once

#include <poll.h>

#include <vector>

#include "common/clock.h"
#include "common/fork.h"
#include "transport/tcp/link.h"

namespace pycollect {
namespace tcp {

class Poller {
 public:
  Poller();  // throws Error if the eventfd cannot be made
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  void wake();
  // Returns when a socket of `links` is ready for its queued direction, one of
  // `readable` (other descriptors) can be read, after a wake(), or at `until`.
  // Socket errors surface in the link's next progress call.
  void wait(const std::vector<Link*>& links, const std::vector<int>& readable,
            Clock::time_point until);

 private:
  fork::Owner owner_;
  int wakeFd_ = -1;
  std::vector<pollfd> fds_;  // reused across waits
};

}  // namespace tcp
}  // namespace pycollect
