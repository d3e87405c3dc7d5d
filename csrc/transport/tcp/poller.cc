#include "transport/tcp/poller.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "common/error.h"

namespace pycollect {
namespace tcp {

Poller::Poller() {
  wakeFd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd_ < 0) throw Error(syscallMessage("eventfd", errno, "creating the worker's wake-up fd"));
  fork::track(wakeFd_);
}

Poller::~Poller() {
  if (!owner_.here()) return;  // a forked child closed its copy at fork time
  fork::untrack(wakeFd_);
  ::close(wakeFd_);
}

void Poller::wake() {
  uint64_t one = 1;
  ssize_t ignored = ::write(wakeFd_, &one, sizeof(one));
  (void)ignored;
}

void Poller::wait(const std::vector<Link*>& links, const std::vector<int>& readable,
                  Clock::time_point until) {
  fds_.clear();
  fds_.push_back({wakeFd_, POLLIN, 0});
  for (int fd : readable) fds_.push_back({fd, POLLIN, 0});
  for (Link* l : links) {
    short ev = (l->sendPending() ? POLLOUT : 0) | (l->recvPending() ? POLLIN : 0);
    if (ev) fds_.push_back({l->fd(), ev, 0});
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  int timeout = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(ms + 1, INT_MAX)));
  if (::poll(fds_.data(), fds_.size(), timeout) < 0 && errno != EINTR) {
    throw Error(syscallMessage("poll", errno, "while waiting for the links"));
  }
  if (fds_[0].revents & POLLIN) {
    uint64_t drained;
    while (::read(wakeFd_, &drained, sizeof(drained)) > 0) {
    }
  }
}

}  // namespace tcp
}  // namespace pycollect
