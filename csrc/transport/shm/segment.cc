#include "transport/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "common/error.h"

namespace pycollect {
namespace shm {
namespace {

std::string randomName() {
  unsigned char bits[16];
  size_t got = 0;
  while (got < sizeof(bits)) {
    ssize_t n = ::getrandom(bits + got, sizeof(bits) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(syscallMessage("getrandom", errno, "naming a shared-memory segment"));
    got += static_cast<size_t>(n);
  }
  std::string name = "/pycollect-";
  char hex[3];
  for (unsigned char b : bits) {
    std::snprintf(hex, sizeof(hex), "%02x", b);
    name += hex;
  }
  return name;
}

std::string forPeer(const char* what, int peer) {
  return std::string(what) + " (shared memory with rank " + std::to_string(peer) + ")";
}

}  // namespace

Segment::~Segment() { release(); }

Segment::Segment(Segment&& other) noexcept { *this = std::move(other); }

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    release();
    owner_ = other.owner_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    name_ = std::move(other.name_);
    other.data_ = nullptr;
    other.name_.clear();
  }
  return *this;
}

Segment Segment::create(size_t bytes, int peer) {
  std::string name = randomName();
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, S_IRUSR | S_IWUSR);
  if (fd < 0) throw Error(syscallMessage("shm_open", errno, forPeer("creating a segment", peer)));
  // The umask can only narrow the mode; make sure nobody but this user may open it.
  if (::fchmod(fd, S_IRUSR | S_IWUSR) < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) < 0) {
    int err = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw Error(syscallMessage("ftruncate", err, forPeer("sizing a segment", peer)));
  }
  return map(fd, std::move(name), bytes, peer);
}

Segment Segment::open(const std::string& name, size_t bytes, int peer, bool keepName) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) throw Error(syscallMessage("shm_open", errno, forPeer(("opening " + name).c_str(), peer)));
  struct stat st {};
  if (::fstat(fd, &st) < 0 || static_cast<size_t>(st.st_size) != bytes || st.st_uid != ::geteuid()) {
    ::close(fd);
    throw Error("shm_open: " + name + " is not the segment rank " + std::to_string(peer) +
                " offered (size or owner differ)");
  }
  Segment s = map(fd, name, bytes, peer);
  if (!keepName) s.unlink();
  return s;
}

Segment Segment::map(int fd, std::string name, size_t bytes, int peer) {
  fork::track(fd);  // closed in a child forked before the close below
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  fork::untrack(fd);
  ::close(fd);  // the mapping keeps the memory
  Segment s;
  s.name_ = std::move(name);
  if (p == MAP_FAILED) {
    s.unlink();
    throw Error(syscallMessage("mmap", err, forPeer("mapping a segment", peer)));
  }
  s.data_ = p;
  s.bytes_ = bytes;
  ::madvise(p, bytes, MADV_DONTFORK);
  return s;
}

void Segment::unlink() {
  if (name_.empty() || !owner_.here()) return;
  ::shm_unlink(name_.c_str());  // ENOENT: the peer was first
  name_.clear();
}

void Segment::release() {
  if (!owner_.here()) return;  // a forked child has no mapping (MADV_DONTFORK)
  unlink();
  if (data_ != nullptr) ::munmap(data_, bytes_);
  data_ = nullptr;
}

}  // namespace shm
}  // namespace pycollect
