#include "transport/shm/cma.h"

#include <sys/random.h>

#include <cerrno>

namespace pycollect {
namespace shm {
namespace {

uint64_t makeProbeValue() {
  uint64_t v = 0;
  while (::getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v))) {
  }
  return v | 1;  // never 0, the value of unread memory
}

}  // namespace

Probe localProbe() {
  static const uint64_t word = makeProbeValue();
  return {reinterpret_cast<uint64_t>(&word), word};
}

ssize_t readPeer(pid_t pid, const struct iovec* iov, int n, uint64_t remote, size_t bytes) {
  struct iovec from {reinterpret_cast<void*>(remote), bytes};
  for (;;) {
    ssize_t r = ::process_vm_readv(pid, iov, static_cast<unsigned long>(n), &from, 1, 0);
    if (r >= 0) return r;
    if (errno != EINTR) return -errno;
  }
}

bool canRead(pid_t pid, const Probe& probe) {
  uint64_t got = 0;
  struct iovec to {&got, sizeof(got)};
  return readPeer(pid, &to, 1, probe.address, sizeof(got)) == static_cast<ssize_t>(sizeof(got)) &&
         got == probe.value;
}

}  // namespace shm
}  // namespace pycollect
