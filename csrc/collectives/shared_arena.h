// The shared arena: one shared-memory segment per group whose ranks all share a host,
// through which the shared-memory collectives (*_shared.cc) move their data without a
// message on any link. Each rank owns a 64-byte line of flags and two slots of data (one
// per parity of the round, so a rank may fill the next round's slot while its peers still
// read this one's); every rank maps every other rank's lines and slots. A round of at most
// 8 bytes may travel in the line itself, beside the flag that publishes it (lineSlot).
//
// Rounds. Every shared-memory call runs as one or more rounds, numbered alike on every
// rank (1, 2, ...). In round k a rank first waits until every peer has *arrived* at round
// k - 1 (each finished reading round k - 2, which used the same parity), writes its data
// into its slot k % 2, then publishes arrived = k. Whoever needs a peer's data waits for
// that peer's flag, and reads or reduces it in place. Flags are 32-bit counters stored
// with release and read with acquire, so a flag seen means the data before it is seen too.
//
// Pieces. A round may be cut into pieces at offsets of its own in the slot, so that a
// peer works on piece j while this rank writes piece j + 1 (the all-reduce's pipeline,
// allreduce_shared.cc). Pieces are numbered on from call to call (1, 2, ...), alike on
// every rank, with flags of their own: `filled` (this rank's part of piece j is in its
// slot) and `done` (its share of piece j is reduced and written back). A round that runs
// in pieces raises `arrived` once, after its first piece, so that `arrived = k` still
// means "done with round k - 1", which is all a slot's reuse needs.
//
// Waiting. A rank spins on a flag for a while (a pause between looks where the host's ranks
// fit its cores; where they outnumber them, a yield of the core between rounds of looks),
// then sleeps on it with futex(2), which works across processes on a shared mapping. A
// waiter counts itself in the arena's `waiters` before its last look, and a publisher wakes
// the flag's sleepers only when that count is not zero (fences on both sides: no lost
// wake-up, and no system call on the fast path). Sleeps last at most
// kSlice; between them the wait moves the group's links and point-to-point messages,
// checks that every peer still lives (transport.h, checkPeers), the deadline and the
// program's Ctrl-C. A rank whose group fails marks the arena failed and wakes every
// sleeper, so its peers stop at once; a killed rank is seen through its links.
//
// Mismatches. Each rank announces the header of every call it runs (any algorithm) in
// its line, under a sequence lock. A shared-memory call compares the announcements of
// the peers it waited for with its own; a call that waits for headers on its links
// (another algorithm) looks at the announcements too. Ranks that disagree raise
// MismatchError naming both calls, whichever algorithms they chose.
//
// Formation, once, in the group's first shared-memory call (every rank makes the same
// choice: collectives.h): the ranks greet rank 0 over their links; if all of rank 0's
// links run over shared memory, rank 0 creates the segment (an unguessable name, mode
// 0600: shm/segment.h) and sends its name over each authenticated link; each rank maps it
// and says whether it could; rank 0 unlinks the name and tells everyone the verdict. A
// group whose ranks cannot share it runs the link algorithms instead, on every rank alike.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/context.h"
#include "collectives/wire_header.h"
#include "common/types.h"
#include "transport/shm/segment.h"

namespace pycollect {

// Bytes of one slot (per rank and parity): a larger call runs as several rounds.
constexpr size_t kArenaSlotBytes = 1 << 20;
// A broadcast's round: the root fills the next piece while the others copy this one out
// (a whole slot per round would leave one side idle while the other copies).
constexpr size_t kArenaPipeBytes = 64 << 10;

class SharedArena {
 public:
  SharedArena(int rank, int size) : rank_(rank), size_(size), seenArrived_(size, 0) {}

  // Every rank, inside a call whose context is `ctx` (the group's first shared-memory
  // call forms the arena: see above). False: the group cannot share memory (then never).
  bool ensure(Context& ctx);
  // On the driving thread: whether the arena was formed.
  bool ready() const { return state_ == State::kReady; }

  // Publishes `call` as the call this rank runs now (any algorithm).
  void announce(const WireHeader& call);
  // Throws MismatchError if `peer` announced another call under `call`'s sequence number,
  // where either call runs on the arena (calls on links compare headers on their links).
  void checkAnnounced(const WireHeader& call, int peer) const;

  // The next round's number, and this rank's slot and `peer`'s for round `round`.
  uint32_t nextRound() { return ++round_; }
  char* slot(int peer, uint32_t round) const;
  // Copies `bytes` from `src` into this rank's slot of `round` at `offset`: what its peers
  // will read, counted as sent (bytesWritten).
  void put(uint32_t round, size_t offset, const void* src, size_t bytes);
  // Counts `bytes` written into this rank's slot in place (not by put), for its peers to read.
  void wrote(size_t bytes) { written_ += bytes; }
  // Bytes put into the arena so far (the communicator adds them to its links' bytes sent).
  uint64_t bytesWritten() const { return written_; }

  // A round of at most kLineBytes may travel in the ranks' flag lines instead of their
  // slots: one cache line a rank is written and read in the call, not two. This rank's or
  // `peer`'s place for round `round`, and this rank's data put there (counted as sent).
  static constexpr size_t kLineBytes = 8;
  char* lineSlot(int peer, uint32_t round) const { return line(peer).small[round & 1]; }
  void putInLine(uint32_t round, const void* src, size_t bytes);

  // Round `round`: publish that this rank arrived (its slot holds its data).
  void arrive(uint32_t round) { publish(line(rank_).arrived, round); }
  // Waits until `peer` arrived at `round`, unless this rank saw it there already
  // (seenArrived_: a look at a line its owner is writing costs both a cache miss); the
  // wait names `what`.
  void waitArrived(Context& ctx, int peer, uint32_t round, const char* what);
  // Waits until every peer arrived at `round`, and checks that each announced this call.
  // Every shared-memory call does, once, so that every rank names a mismatch.
  void waitAllArrived(Context& ctx, uint32_t round, const char* what);
  // Before writing its slot for `round`: every peer is done with round - 2.
  void waitSlotFree(Context& ctx, uint32_t round);

  // Pieces (above): the first of `count` new piece numbers; this rank's part of `piece`
  // is in its slot, or its share of it is reduced; wait for `peer`'s.
  uint32_t nextPieces(uint32_t count) {
    const uint32_t first = piece_ + 1;
    piece_ += count;
    return first;
  }
  void filled(uint32_t piece) { publish(line(rank_).filled, piece); }
  void done(uint32_t piece) { publish(line(rank_).done, piece); }
  void waitFilled(Context& ctx, int peer, uint32_t piece, const char* what);
  void waitDone(Context& ctx, int peer, uint32_t piece, const char* what);

  // Any thread: the group failed on this rank because of `why`; every peer's waits stop
  // at once, with an error that tells it.
  void poison(const std::string& why);

 private:
  enum class State { kUntried, kReady, kUnavailable };
  struct alignas(64) Line {
    std::atomic<uint32_t> arrived;
    std::atomic<uint32_t> filled;  // pieces (above)
    std::atomic<uint32_t> done;
    std::atomic<uint32_t> version;    // the announcement's sequence lock: odd while written
    std::atomic<uint64_t> header[4];  // the announced WireHeader, as words
    char small[2][kLineBytes];        // a small round's data, by parity (lineSlot)
  };
  static_assert(sizeof(Line) == 64, "one cache line a rank");
  struct alignas(64) Control {
    std::atomic<uint32_t> failed;  // 1 + the rank that failed, 0 while none
    std::atomic<uint32_t> waiters;
    std::atomic<uint32_t> claimed;  // the first rank to fail writes `why`
    char why[500];                  // why it failed, once `failed` is set
  };

  Line& line(int r) const { return reinterpret_cast<Line*>(base() + sizeof(Control))[r]; }
  Control& control() const { return *reinterpret_cast<Control*>(base()); }
  char* base() const { return static_cast<char*>(segment_.data()); }
  size_t headBytes() const;  // the control block and the lines, rounded up to a page: the slots follow
  size_t bytes() const;

  bool form(Context& ctx);
  void publish(std::atomic<uint32_t>& flag, uint32_t value);
  // Waits until `flag` (of `peer`) reaches `value`.
  void waitFlag(Context& ctx, std::atomic<uint32_t>& flag, uint32_t value, int peer, const char* what);
  // A peer marked the arena failed: a mismatch with a peer's announced call is named
  // first (the peer that saw it failed for it), else the peer's failure.
  [[noreturn]] void throwPoisoned(const Context& ctx) const;

  const int rank_, size_;
  State state_ = State::kUntried;
  shm::Segment segment_;
  std::atomic<bool> mapped_{false};  // poison() may run on any thread
  uint32_t round_ = 0;
  std::vector<uint32_t> seenArrived_;  // by rank: the highest round seen arrived (the driving thread)
  uint32_t piece_ = 0;
  uint64_t written_ = 0;
};

// Runs body(round, offset, n) for each piece of at most `perRound` of `total` elements (one
// round at least: a call of 0 still meets its peers), naming the steps `phase`, each after
// waiting until the peers are done with the slot's previous use.
template <class Body>
void inRounds(Context& ctx, SharedArena& a, size_t total, size_t perRound, const char* phase, Body body) {
  const int rounds = total == 0 ? 1 : static_cast<int>((total + perRound - 1) / perRound);
  size_t off = 0;
  for (int i = 0; i < rounds; ++i) {
    const size_t n = std::min(perRound, total - off);
    const uint32_t k = a.nextRound();
    ctx.setStep(phase, i, rounds);
    a.waitSlotFree(ctx, k);
    body(k, off, n);
    off += n;
  }
}

// A call of one round (gather, scatter, all-to-all): its number, named `phase`, once the
// peers are done with the slot's previous use.
inline uint32_t oneRound(Context& ctx, SharedArena& a, const char* phase) {
  const uint32_t k = a.nextRound();
  ctx.setStep(phase, 0, 1);
  a.waitSlotFree(ctx, k);
  return k;
}

// Parts. Gather, scatter and all-to-all move parts whose sizes differ by rank (only the
// ends of a pair know a part's size), so they run on the arena at any size, in one round
// (gather_shared.cc, alltoall_shared.cc). The writer of a part puts, in a block of its slot
// for the reader, a head (its call's header with the part's count) and, where the part is
// small, the part itself right behind it; a larger part travels over the pair's link. Both
// ends know the part's size, so they agree on its way; the reader checks the head before it
// uses a small part, so a pair that disagrees raises MismatchError naming both calls.
constexpr size_t kArenaPartBytes = 8 << 10;
// Bytes of a block where a slot holds `blocks` of them (one for each reader).
size_t partBlockBytes(int blocks);
// Whether a part of `bytes` travels in a block of `block` bytes (else over its link).
bool partInBlock(size_t bytes, size_t block);
// This rank's head for a reader at `offset` of its slot of `round`: its call with `count`.
void putHead(const Context& ctx, SharedArena& a, uint32_t round, size_t offset, size_t count);
// `peer`'s head at `offset` of its slot of `round` against this rank's call with `count`.
void checkHead(const Context& ctx, const SharedArena& a, uint32_t round, int peer, size_t offset, size_t count);

// dst = slot 0 op slot 1 op ... op slot size-1 of round `round`, `count` elements from
// `offset` bytes into each slot (AVG: divided by the size): the same order on every rank,
// so the same bits (allreduce_shared.cc). dst may be any memory but a slot read here.
// With `own`, rank `self`'s term is read from `own` instead of its slot (the same values:
// a rank's own input need not pass through the arena to be reduced by itself).
void reduceSlots(const SharedArena& a, int size, uint32_t round, size_t offset, size_t count, DType dtype,
                 ReduceOp op, void* dst, int self = -1, const void* own = nullptr);
// The same on the round's data in the ranks' flag lines (SharedArena::lineSlot).
void reduceLines(const SharedArena& a, int size, uint32_t round, size_t count, DType dtype, ReduceOp op, void* dst);

// Rounds of more than this many bytes run as a pipeline of pieces (allreduce_shared.cc).
constexpr size_t kOnePhaseBytes = 32 << 10;
// One round of `n` elements at `data` (its input, and its output where it has one) as the
// all-reduce's pipeline of pieces, in round k's slots: every rank reduces its chunk of each
// piece; with `root` >= 0 (a reduce) only the root copies the others' chunks out, and the
// other ranks' `data` is left as it was (allreduce_shared.cc).
void pipelinedRound(Context& ctx, SharedArena& a, uint32_t k, char* data, size_t n, DType dtype, ReduceOp op,
                    int root = -1);

}  // namespace pycollect
