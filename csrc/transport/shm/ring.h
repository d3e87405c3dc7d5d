// The layout of a link's segment and the single-producer/single-consumer byte
// ring that carries one direction of it.
//
//   [Header: magic, sleeping[2]] [Channel 0->1] [Channel 1->0] [ring 0->1] [ring 1->0]
//
// Side 0 is the lower rank. A Channel holds the cursors of one direction, each on
// its own cache line: `head` (bytes the producer has written, ever), `tail` (bytes
// the consumer has consumed) and `acked` (bytes the consumer has copied straight
// out of the producer's memory, link.h). Cursors only grow; the ring offset is
// cursor % capacity. The producer publishes with a release store after writing,
// the consumer reads with an acquire load, so bytes below `head` are complete.
// `sleeping[s]` is set by side s before it blocks in poll (link.h: the doorbell).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pycollect {
namespace shm {

struct alignas(64) Cursor {
  std::atomic<uint64_t> value{0};
};
static_assert(sizeof(Cursor) == 64, "one cursor per cache line");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "cursors are shared between processes");

struct Channel {
  Cursor head;
  Cursor tail;
  Cursor acked;
};

struct Header {
  uint64_t magic;
  Cursor sleeping[2];
};

constexpr uint64_t kSegmentMagic = 0x31'4d48'534c'4f43;  // "COLSHM1"

// Bytes of a segment with two rings of `ringBytes` each.
size_t segmentBytes(size_t ringBytes);

class Ring {
 public:
  Ring() = default;
  // `base`: the mapped segment; `direction`: 0 for side 0 -> 1, 1 for 1 -> 0.
  Ring(void* base, size_t ringBytes, int direction);

  Channel& channel() const { return *channel_; }
  size_t capacity() const { return capacity_; }

  // Producer side. write() copies at the local head (wrapping); publish() makes it visible.
  size_t freeBytes() const { return capacity_ - (head_ - channel_->tail.value.load(std::memory_order_acquire)); }
  void write(const void* src, size_t n);
  void pad(size_t n) { head_ += n; }  // leaves n bytes unwritten (alignment)
  void publish() { channel_->head.value.store(head_, std::memory_order_release); }

  // Consumer side. read() copies from the local tail (wrapping); consume() frees it.
  size_t available() const { return channel_->head.value.load(std::memory_order_acquire) - tail_; }
  void read(void* dst, size_t n);
  void skip(size_t n) { tail_ += n; }
  void consume() { channel_->tail.value.store(tail_, std::memory_order_release); }

 private:
  Channel* channel_ = nullptr;
  char* data_ = nullptr;
  size_t capacity_ = 0;
  uint64_t head_ = 0;  // producer's own copy
  uint64_t tail_ = 0;  // consumer's own copy
};

}  // namespace shm
}  // namespace pycollect
