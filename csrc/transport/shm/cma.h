// Single-copy reads of a peer's memory (cross-memory attach: process_vm_readv).
// A large send is not copied into the ring: the sender posts the address of its
// range, and the receiver copies it straight into its own receive buffer, one copy
// instead of two. The kernel allows it only where this process may ptrace the
// peer (same user, and no Yama or seccomp rule against it), and only when the
// peer's pid means the same process here (same pid namespace): the probe checks
// both, once per link, by reading a random word the peer published. Where it
// fails, that direction of the link copies through the ring instead.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>

namespace pycollect {
namespace shm {

// This process's probe word: a random value at a fixed address.
struct Probe {
  uint64_t address = 0;
  uint64_t value = 0;
};
Probe localProbe();

// Whether `pid` can be read here and its probe word holds what it published.
bool canRead(pid_t pid, const Probe& probe);

// Copies `bytes` from `remote` in process `pid` into the local ranges `iov`
// (which hold at least `bytes`). Returns bytes read (may be short), or -errno.
ssize_t readPeer(pid_t pid, const struct iovec* iov, int n, uint64_t remote, size_t bytes);

}  // namespace shm
}  // namespace pycollect
