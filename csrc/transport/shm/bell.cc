#include "transport/shm/bell.h"

#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "common/error.h"

namespace pycollect {
namespace shm {

Bell::Bell() : Bell(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) throw Error(syscallMessage("eventfd", errno, "for the shared-memory wake-up"));
}

Bell::Bell(int fd) : fd_(fd) {
  if (fd_ >= 0) fork::track(fd_);
}

Bell::Bell(Bell&& other) noexcept : owner_(other.owner_), fd_(other.fd_) { other.fd_ = -1; }

Bell Bell::borrow(pid_t pid, int fd) {
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
  if (fd < 0) return Bell(-1);
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return Bell(-1);
  int mine = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0));  // close-on-exec, as pidfd_getfd sets
  ::close(pidfd);
  return Bell(mine < 0 ? -1 : mine);
#else
  (void)pid;
  (void)fd;
  return Bell(-1);
#endif
}

Bell::~Bell() {
  if (fd_ < 0 || !owner_.here()) return;
  fork::untrack(fd_);
  ::close(fd_);
}

void Bell::ring() {
  const uint64_t one = 1;
  // EAGAIN only when the counter is full: the owner has unread rings that wake it anyway.
  while (::write(fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void Bell::drain() {
  uint64_t rings;
  while (::read(fd_, &rings, sizeof(rings)) < 0 && errno == EINTR) {
  }
}

}  // namespace shm
}  // namespace pycollect
