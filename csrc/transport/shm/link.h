// The shared-memory Link: two SPSC byte rings in one segment (ring.h), one per
// direction, plus a Doorbell (below): how a sleeping peer is woken (its Bell, bell.h)
// and how its death shows (the TCP connection the two ranks met on; mesh/doorbell.h).
//
// Records. A send range becomes records in the ring, each a 16-byte RecordHeader
// {bytes, address}: address 0 means the bytes follow in the ring (copied in by
// the sender, out by the receiver); otherwise the receiver copies `bytes` straight
// from that address in the sender's memory (cma.h: one copy instead of two) and
// then advances the direction's `acked` cursor. Ranges of at least the link's
// singleCopyBytes (TransportOptions::shmSingleCopyBytes) go that way where the probe
// allowed it. Send tickets complete in order: a ring range once written, a
// single-copy one once acked (so its memory stays valid until the peer has read it).
//
// Which is faster depends on the cores. Through the ring the sender copies in while
// the receiver copies out, two cores on one message; a read is one copy, by the
// receiver alone, plus the kernel pinning the sender's pages and the acknowledgement
// the sender waits for. With a core per rank the ring wins; where ranks outnumber cores
// the second copy takes a core another rank needs, and reads win (docs/measurements.md,
// "Shared memory: ring or single-copy reads"). So the group picks the threshold by
// that (pycollect/options.py, default_single_copy_bytes).
//
// Waiting. A rank with nothing to do spins briefly on the peer's cursors
// (mesh::Transport::waitReady), then sets its `sleeping` flag and blocks in poll on its
// Bell and the doorbells' sockets. A rank that moves a cursor checks the peer's flag
// afterwards and, if set, clears it and rings the doorbell. Flag and cursors are ordered
// with sequentially consistent fences on both sides, so a wake-up is never lost.
// When the peer dies, its kernel closes the socket: poll wakes and the next
// progress() throws PeerLostError (never a silent hang on shared memory).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/link.h"
#include "transport/range_queue.h"
#include "transport/shm/ring.h"
#include "transport/shm/segment.h"

namespace pycollect {
namespace shm {

constexpr size_t kRingBytes = 2 << 20;            // per direction
constexpr size_t kRecordBytes = 128 << 10;        // largest ring record's payload
constexpr size_t kNoSingleCopy = SIZE_MAX;  // a Link's singleCopyBytes where the peer cannot read us
constexpr size_t kSingleCopyChunk = 1 << 20;      // bytes per process_vm_readv, then acked

struct RecordHeader {
  uint64_t bytes;
  uint64_t address;  // 0: in the ring
};
static_assert(sizeof(RecordHeader) == 16, "records are 16-byte aligned");

// How a sleeping rank is woken, and how the peer's death shows: what the mesh provides
// next to the segment (mesh/doorbell.h: the peer's Bell to ring, the TCP connection the
// two ranks met on to watch). Its descriptor becomes readable when the peer goes away
// (or rings over it, where its Bell could not be borrowed).
class Doorbell {
 public:
  virtual ~Doorbell() = default;
  virtual int peer() const = 0;
  virtual int fd() const = 0;
  // Wakes the peer; never blocks (a full channel has unread rings that wake it anyway).
  virtual void ring() = 0;
  // Reads every ring that came; returns "" or, once the peer is gone, why.
  virtual std::string drain() = 0;
  virtual void abort() = 0;      // shuts the channel down: the peer's poll sees it at once
  virtual void interrupt() = 0;  // wakes a poll on it, from any thread
  virtual void close() = 0;
};

class Link final : public pycollect::Link {
 public:
  // `side`: 0 for the lower rank. Sends of at least `singleCopyBytes` are read by the
  // peer from our memory (kNoSingleCopy: none, the peer cannot read it).
  Link(std::unique_ptr<Doorbell> doorbell, Segment segment, int side, pid_t peerPid, size_t singleCopyBytes);

  int peer() const override { return doorbell_->peer(); }
  int fd() const { return doorbell_->fd(); }

  bool withdrawRecv(uint64_t ticket, size_t bytes) override { return recvs_.unpost(ticket, bytes); }
  bool sent(uint64_t ticket) const override { return sends_.done(ticket); }
  bool received(uint64_t ticket) const override { return recvs_.done(ticket); }
  bool sendPending() const override { return !sends_.empty(); }
  bool recvPending() const override { return !recvs_.empty(); }
  bool busy() const { return sendPending() || recvPending(); }

  // Moves what can move now in both directions and rings the peer's doorbell if it
  // sleeps. Throws PeerLostError naming the peer once it is gone and work remains.
  void progress();
  // Whether the peer moved a cursor since the last progress() began, or a queued send
  // could be written now: either way progress() has work, and a wait must not sleep.
  bool moved() const;
  // Before blocking in poll: raise our sleeping flag; returns moved() seen after it.
  bool arm();
  // After poll: lower the flag and read the doorbell bytes; a closed socket is
  // remembered and thrown by the next progress().
  void disarm();
  // Reads the doorbell (without sleeping) and throws PeerLostError once the peer is gone.
  void checkAlive();

  void abort() override;
  void interrupt() override { doorbell_->interrupt(); }
  void close() override { doorbell_->close(); }

 protected:
  uint64_t queueSend(const void* data, size_t bytes) override;
  uint64_t queueRecv(void* data, size_t bytes) override;

 private:
  struct SendRange : PostedRange {
    bool single;      // read by the peer from our memory
    uint64_t ackEnd;  // single: done once `acked` reaches this
  };
  bool progressSend();
  bool progressRecv();
  bool readSingle();
  void ring();
  void snapshot();
  // Reads the rings that came; remembers in lost_ why the peer is gone, once it is.
  void readDoorbell();
  [[noreturn]] void fail(const char* call, int err) const;

  std::unique_ptr<Doorbell> doorbell_;
  Segment segment_;
  Header* header_;
  int side_;
  pid_t peerPid_;
  size_t singleCopyBytes_;
  Ring tx_, rx_;
  RangeQueue<SendRange> sends_;
  size_t handedOff_ = 0;     // leading sends_ fully written or posted as single-copy
  uint64_t singlePosted_ = 0;
  RangeQueue<> recvs_;
  RecordHeader record_{0, 0};  // what is left of the record being received
  size_t recordPad_ = 0;
  uint64_t seenHead_ = 0, seenTail_ = 0, seenAcked_ = 0;  // the peer's cursors, noted as the last progress began
  std::string lost_;  // why the doorbell says the peer is gone
};

}  // namespace shm
}  // namespace pycollect
