// One shared-memory segment between two ranks of the same host: the lower rank
// creates it under an unguessable name (/pycollect-<128 random bits>, mode 0600,
// O_EXCL), the higher rank opens it by that name, which it learned over their
// authenticated TCP link, and both unlink the name as soon as they have it mapped.
// From then on no name exists: the kernel frees the memory when the last mapping
// goes, so a rank killed at any later moment leaves nothing in /dev/shm.
//
// The mapping is MADV_DONTFORK: a forked child does not inherit it, and the
// destructor of a copy in a forked child touches nothing (fork::Owner).
#pragma once

#include <cstddef>
#include <string>

#include "common/fork.h"

namespace pycollect {
namespace shm {

class Segment {
 public:
  Segment() = default;
  ~Segment();
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Creates and maps `bytes` of zeroed shared memory under a fresh random name.
  // Throws Error naming the syscall and errno (and `peer`, the rank it is for).
  static Segment create(size_t bytes, int peer);
  // Maps the segment another rank created; unlinks its name at once unless `keepName`
  // (a segment of several ranks: its creator unlinks it once all have it). Throws Error.
  static Segment open(const std::string& name, size_t bytes, int peer, bool keepName = false);

  // Removes the name (idempotent; the mapping stays valid).
  void unlink();

  void* data() const { return data_; }
  // Whether the mapping is this process's (a forked child has none: MADV_DONTFORK).
  bool mappedHere() const { return data_ != nullptr && owner_.here(); }
  size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

 private:
  static Segment map(int fd, std::string name, size_t bytes, int peer);
  void release();

  fork::Owner owner_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::string name_;  // empty once unlinked
};

}  // namespace shm
}  // namespace pycollect
