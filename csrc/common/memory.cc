#include "common/memory.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

namespace pycollect {
namespace {

bool byteWritable(const char* p) {
  char value = *p;  // readable: the caller's buffer was validated as readable memory
  struct iovec local = {&value, 1};
  struct iovec remote = {const_cast<char*>(p), 1};
  if (::process_vm_writev(::getpid(), &local, 1, &remote, 1, 0) == 1) return true;
  return errno != EFAULT;
}

}  // namespace

bool isWritable(const void* p, size_t n) {
  if (n == 0) return true;
  const char* first = static_cast<const char*>(p);
  return byteWritable(first) && byteWritable(first + n - 1);
}

}  // namespace pycollect
