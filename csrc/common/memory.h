// Questions about user memory that must be answered without touching it.
#pragma once

#include <cstddef>

namespace pycollect {

// Whether the bytes [p, p + n) can be written without a fault. Checks the first
// and the last byte by writing each back with its own value through
// process_vm_writev, which reports EFAULT instead of raising SIGSEGV (a tensor on
// a read-only mapping, e.g. a memmap opened with mode "r"). Where the kernel
// refuses the call itself (a sandbox), it answers true: the check is a courtesy.
bool isWritable(const void* p, size_t n);

}  // namespace pycollect
