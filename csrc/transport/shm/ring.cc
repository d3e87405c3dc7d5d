#include "transport/shm/ring.h"

#include <cstring>

namespace pycollect {
namespace shm {
namespace {
size_t headerBytes() { return sizeof(Header) + 2 * sizeof(Channel); }
}  // namespace

size_t segmentBytes(size_t ringBytes) { return headerBytes() + 2 * ringBytes; }

Ring::Ring(void* base, size_t ringBytes, int direction) : capacity_(ringBytes) {
  char* p = static_cast<char*>(base);
  channel_ = reinterpret_cast<Channel*>(p + sizeof(Header)) + direction;
  data_ = p + headerBytes() + direction * ringBytes;
}

void Ring::write(const void* src, size_t n) {
  size_t at = head_ % capacity_;
  size_t first = n < capacity_ - at ? n : capacity_ - at;
  std::memcpy(data_ + at, src, first);
  std::memcpy(data_, static_cast<const char*>(src) + first, n - first);
  head_ += n;
}

void Ring::read(void* dst, size_t n) {
  size_t at = tail_ % capacity_;
  size_t first = n < capacity_ - at ? n : capacity_ - at;
  std::memcpy(dst, data_ + at, first);
  std::memcpy(static_cast<char*>(dst) + first, data_, n - first);
  tail_ += n;
}

}  // namespace shm
}  // namespace pycollect
