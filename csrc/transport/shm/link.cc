#include "transport/shm/link.h"

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "common/error.h"
#include "transport/shm/cma.h"

namespace pycollect {
namespace shm {
namespace {
constexpr int kMaxIov = 16;
size_t padOf(size_t bytes) { return (16 - bytes % 16) % 16; }
}  // namespace

Link::Link(std::unique_ptr<Doorbell> doorbell, Segment segment, int side, pid_t peerPid, size_t singleCopyBytes)
    : doorbell_(std::move(doorbell)), segment_(std::move(segment)),
      header_(static_cast<Header*>(segment_.data())), side_(side), peerPid_(peerPid),
      singleCopyBytes_(singleCopyBytes), tx_(segment_.data(), kRingBytes, side),
      rx_(segment_.data(), kRingBytes, 1 - side) {}

uint64_t Link::queueSend(const void* data, size_t bytes) {
  bool single = bytes >= singleCopyBytes_;
  return sends_.post({{static_cast<char*>(const_cast<void*>(data)), bytes}, single, 0});
}

uint64_t Link::queueRecv(void* data, size_t bytes) { return recvs_.post({static_cast<char*>(data), bytes}); }

void Link::progress() {
  // The peer's cursors are noted before they are read to move bytes: a cursor the peer
  // moves after that read (and before the note) would otherwise look seen, and the
  // next wait would sleep with its bytes unread (a lost wake-up). Noted first, such a
  // move at worst costs one extra pass.
  snapshot();
  bool changed = progressSend();
  changed = progressRecv() || changed;
  if (changed) ring();
  // A peer that closed its socket may have left its last bytes in the ring (it
  // finished and left): they are taken first, as TCP delivers data before a FIN, so
  // the loss is reported only by a pass that moved nothing (progressRecv stops at each
  // completed receive, so taking them can need several passes).
  if (!lost_.empty() && busy() && !changed) throw PeerLostError(lost_);
}

// Writes queued ranges into the ring (or posts them as single-copy records), then
// retires the leading ranges that are done.
bool Link::progressSend() {
  bool changed = false;
  while (handedOff_ < sends_.size()) {
    SendRange& s = sends_[handedOff_];
    if (s.left == 0) {
      ++handedOff_;
      continue;
    }
    size_t room = tx_.freeBytes();
    if (s.single) {
      if (room < sizeof(RecordHeader)) break;
      RecordHeader h{s.left, reinterpret_cast<uint64_t>(s.data)};
      tx_.write(&h, sizeof(h));
      singlePosted_ += s.left;
      s.ackEnd = singlePosted_;
      s.left = 0;
    } else {
      if (room < 2 * sizeof(RecordHeader)) break;
      size_t n = std::min({s.left, kRecordBytes, (room - sizeof(RecordHeader)) & ~size_t{15}});
      RecordHeader h{n, 0};
      tx_.write(&h, sizeof(h));
      tx_.write(s.data, n);
      tx_.pad(padOf(n));
      s.data += n;
      s.left -= n;
    }
    tx_.publish();  // record by record, so the receiver starts early
    changed = true;
    if (s.left == 0) ++handedOff_;
  }
  uint64_t acked = tx_.channel().acked.value.load(std::memory_order_acquire);
  while (handedOff_ > 0 && (!sends_.front().single || acked >= sends_.front().ackEnd)) {
    sends_.retireFront();
    --handedOff_;
    sendsCompleted(sends_.doneCount());
  }
  return changed;
}

// Moves bytes into the queued receive ranges until one completes (or nothing more is
// there). Returning at the first completion lets the algorithm act on it at once: a
// chain broadcast forwards segment j while segment j+1 is still being read. Draining
// everything first made the middle rank of a 3-rank chain take the whole buffer before
// forwarding any of it (seen in its trace), so the chain did not pipeline on shared
// memory. moved() counts the bytes left behind as work, so no wait sleeps on them.
bool Link::progressRecv() {
  bool changed = false;
  const uint64_t doneBefore = recvs_.doneCount();
  while (!recvs_.empty() && recvs_.doneCount() == doneBefore) {
    PostedRange& r = recvs_.front();
    if (r.left == 0) {  // an empty receive
      recvs_.advance(0);
      break;
    }
    if (record_.bytes == 0) {
      if (rx_.available() < sizeof(RecordHeader)) break;  // records are published whole
      rx_.read(&record_, sizeof(record_));
      recordPad_ = record_.address == 0 ? padOf(record_.bytes) : 0;
      if (record_.address != 0) rx_.consume();  // the header is all it holds
      changed = true;
    }
    if (record_.address != 0) {
      if (!readSingle()) break;
      changed = true;  // acked moved: the sender may wait for it
      continue;
    }
    size_t n = std::min(record_.bytes, r.left);
    rx_.read(r.data, n);
    recvs_.advance(n);
    record_.bytes -= n;
    if (record_.bytes == 0) rx_.skip(recordPad_);
    rx_.consume();
    changed = true;  // tail moved: the sender may wait for room
  }
  if (recvs_.doneCount() != doneBefore) recvsCompleted(recvs_.doneCount());
  return changed;
}

// Copies the current single-copy record from the sender's memory into the queued
// receive ranges, up to kSingleCopyChunk at a time, and acknowledges it.
bool Link::readSingle() {
  struct iovec iov[kMaxIov];
  int n = recvs_.gather(iov, kMaxIov, std::min(record_.bytes, kSingleCopyChunk));
  if (n == 0) return false;
  size_t total = 0;
  for (int i = 0; i < n; ++i) total += iov[i].iov_len;
  ssize_t got = readPeer(peerPid_, iov, n, record_.address, total);
  if (got < 0) fail("process_vm_readv", static_cast<int>(-got));
  if (got == 0) fail("process_vm_readv", EFAULT);
  recvs_.advance(static_cast<size_t>(got));
  record_.address += got;
  record_.bytes -= got;
  auto& acked = rx_.channel().acked.value;
  acked.store(acked.load(std::memory_order_relaxed) + got, std::memory_order_release);
  return true;
}

void Link::snapshot() {
  seenHead_ = rx_.channel().head.value.load(std::memory_order_acquire);
  seenTail_ = tx_.channel().tail.value.load(std::memory_order_acquire);
  seenAcked_ = tx_.channel().acked.value.load(std::memory_order_acquire);
}

bool Link::moved() const {
  // A send posted since the last progress() (e.g. a point-to-point send queued just
  // before the wait) is not written yet: the peer can only see it after one more pass.
  if (handedOff_ < sends_.size() && tx_.freeBytes() >= 2 * sizeof(RecordHeader)) return true;
  // Likewise bytes already here for a queued receive, left by a progress() that stopped
  // at a completed receive (progressRecv): the wait's first look (Transport::spin) sees
  // them and goes straight back to progress(), before any flag or doorbell.
  if (!recvs_.empty() && (record_.bytes != 0 || rx_.available() >= sizeof(RecordHeader))) return true;
  return rx_.channel().head.value.load(std::memory_order_seq_cst) != seenHead_ ||
         tx_.channel().tail.value.load(std::memory_order_seq_cst) != seenTail_ ||
         tx_.channel().acked.value.load(std::memory_order_seq_cst) != seenAcked_;
}

// After moving a cursor: wake the peer if it went to sleep (see the header).
void Link::ring() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  auto& theirs = header_->sleeping[1 - side_].value;
  if (theirs.load(std::memory_order_relaxed) == 0 || theirs.exchange(0) == 0) return;
  doorbell_->ring();
}

bool Link::arm() {
  header_->sleeping[side_].value.store(1, std::memory_order_seq_cst);
  return moved();
}

void Link::disarm() {
  header_->sleeping[side_].value.store(0, std::memory_order_relaxed);
  readDoorbell();  // a loss is thrown by the next progress()
}

void Link::checkAlive() {
  readDoorbell();
  if (!lost_.empty()) throw PeerLostError(lost_);
}

void Link::readDoorbell() {
  std::string why = doorbell_->drain();
  if (!why.empty() && lost_.empty()) lost_ = why;
}

void Link::fail(const char* call, int err) const {
  throw PeerLostError("shared-memory link to rank " + std::to_string(peer()) + " lost: " +
                      syscallMessage(call, err, err == ESRCH ? "the peer exited" : "reading its memory"));
}

void Link::abort() {
  sends_.abandon();
  recvs_.abandon();
  handedOff_ = 0;
  doorbell_->abort();  // the peer's poll sees it at once
}

}  // namespace shm
}  // namespace pycollect
