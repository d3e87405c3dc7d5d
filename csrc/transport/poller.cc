#include "transport/poller.h"

#include <poll.h>

#include <cerrno>

#include "common/error.h"

namespace pycollect {

void waitUntil(const std::vector<Link*>& links, const std::function<bool()>& done,
               Clock::time_point deadline, const std::function<std::string()>& describe) {
  std::vector<pollfd> fds;
  for (;;) {
    // Optimistic pass: the socket usually has room or data already.
    for (Link* l : links) {
      if (l->sendPending()) l->progressSend();
      if (l->recvPending()) l->progressRecv();
    }
    if (done()) return;

    fds.clear();
    for (Link* l : links) {
      short ev = 0;
      if (l->sendPending()) ev |= POLLOUT;
      if (l->recvPending()) ev |= POLLIN;
      if (ev == 0) continue;
      fds.push_back({l->fd(), ev, 0});
    }
    if (fds.empty()) {
      throw Error("internal error: waiting with nothing in flight (" + describe() + ")");
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) throw TimeoutError(describe());
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()) + 1);
    if (rc < 0 && errno != EINTR) throw Error(syscallMessage("poll", errno, describe()));
    // Errors and hang-ups surface through the next progress call on that link.
  }
}

}  // namespace pycollect
