// How a rank asleep on its shared-memory links is woken: an eventfd of its own (a Bell),
// which each same-host peer holds a duplicate of, taken from the rank's process at the
// upgrade (mesh/upgrade.h) with pidfd_getfd(2). A peer that moved a cursor while the rank
// slept writes to it (Link::ring); the rank's one poll watches it beside its sockets.
//
// Before, the wake-up was a byte on the TCP connection the two ranks met on: a trip
// through the network stack for ranks that share memory, lost outright when that
// connection runs over a cable that is cut (ranks in network namespaces that share
// memory), so the group fell back to its periodic checks (~100x slower). The TCP
// connection stays, for what only it can say: that the peer died or aborted.
//
// pidfd_getfd needs Linux 5.6 and the right to ptrace the peer (the rule that single-copy
// reads, cma.h, need too); where either is missing, a borrowed Bell is not valid() and the
// link rings over TCP as before.
#pragma once

#include <sys/types.h>

#include "common/fork.h"

namespace pycollect {
namespace shm {

class Bell {
 public:
  Bell();  // a new eventfd, non-blocking, closed in a forked child (common/fork.h)
  // A descriptor in this process for `fd` of process `pid` (a peer's Bell); valid() is
  // false where the kernel refuses (see above).
  static Bell borrow(pid_t pid, int fd);
  ~Bell();
  Bell(Bell&& other) noexcept;
  Bell& operator=(Bell&&) = delete;
  Bell(const Bell&) = delete;
  Bell& operator=(const Bell&) = delete;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Wakes the rank that owns this Bell (the peer's, when borrowed). Never blocks.
  void ring();
  // Takes every ring that came (after a poll: the next sleep starts quiet).
  void drain();

 private:
  explicit Bell(int fd);
  fork::Owner owner_;  // a forked child neither closes nor uses the parent's descriptor
  int fd_;
};

}  // namespace shm
}  // namespace pycollect
