#include "collectives/shared_arena.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <thread>

#include "collectives/context.h"
#include "common/error.h"
#include "common/interrupt.h"
#include "transport/link.h"

namespace pycollect {
namespace {

// How long a wait spins before it sleeps, and how long one sleep lasts at most.
constexpr auto kSpin = std::chrono::microseconds(100);
constexpr auto kSlice = std::chrono::milliseconds(2);

// The CPU's spin-wait hint: the core idles a moment and its sibling thread runs.
inline void cpuPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Whether counter `value` has reached `target` (wrapping: rounds count on for ever).
bool reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

// futex(2) on a word of shared memory (not FUTEX_PRIVATE: the sleeper and the waker are
// different processes).
void futexWait(std::atomic<uint32_t>& word, uint32_t seen, std::chrono::nanoseconds limit) {
  timespec ts{static_cast<time_t>(limit.count() / 1000000000), static_cast<long>(limit.count() % 1000000000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Whether a call's count is each rank's own, which may differ by rank (a gather's, a
// scatter's, an all-to-all's total: the heads of its parts compare the parts' counts,
// shared_arena.h "Parts").
bool ownCounts(const WireHeader& call) {
  const auto kind = static_cast<OpKind>(call.kind);
  return kind == OpKind::kGather || kind == OpKind::kScatter || kind == OpKind::kAllToAll;
}

// What rank 0 sends each rank at formation: the segment's name (empty: none), and after
// the ranks answered, the verdict.
struct Offer {
  uint64_t bytes;  // 0: rank 0 cannot share memory with every rank
  char name[56];
};
static_assert(sizeof(Offer) == 64, "one record");

static_assert(sizeof(WireHeader) == 32, "announced as four words");

}  // namespace

size_t SharedArena::headBytes() const {
  return (sizeof(Control) + static_cast<size_t>(size_) * sizeof(Line) + 4095) / 4096 * 4096;
}

size_t SharedArena::bytes() const { return headBytes() + static_cast<size_t>(size_) * 2 * kArenaSlotBytes; }

char* SharedArena::slot(int peer, uint32_t round) const {
  return base() + headBytes() + (static_cast<size_t>(peer) * 2 + (round & 1)) * kArenaSlotBytes;
}

void SharedArena::putInLine(uint32_t round, const void* src, size_t bytes) {
  if (bytes == 0) return;  // a call of 0 elements may pass no buffer at all
  std::memcpy(lineSlot(rank_, round), src, bytes);
  written_ += bytes;
}

void SharedArena::put(uint32_t round, size_t offset, const void* src, size_t bytes) {
  if (bytes == 0) return;
  std::memcpy(slot(rank_, round) + offset, src, bytes);
  written_ += bytes;
}

bool SharedArena::ensure(Context& ctx) {
  if (state_ == State::kUntried) {
    state_ = form(ctx) ? State::kReady : State::kUnavailable;
    if (state_ == State::kReady) announce(ctx.call);  // the calls before were announced nowhere
  }
  if (state_ == State::kReady && control().failed.load(std::memory_order_acquire) != 0) throwPoisoned(ctx);
  return state_ == State::kReady;
}

bool SharedArena::form(Context& ctx) {
  ctx.setStep("shared arena formation", 0, 3);
  // Every rank checks every other's call (and every link is made): ranks whose calls
  // differ all raise MismatchError here, as the link algorithms' header exchanges do.
  std::vector<int> peers;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) peers.push_back(p);
  }
  if (ownCounts(ctx.call)) {  // every rank sends and expects 0 for the count
    const std::vector<uint64_t> none(peers.size(), 0);
    ctx.postHeaders(peers, &none);
    ctx.checkHeaders(&none);
  } else {
    ctx.exchangeHeaders(peers);
  }
  const size_t want = bytes();
  if (rank_ == 0) {
    // Every link is made: rank 0 knows what carries each.
    std::vector<uint64_t> answers(size_, 0), tickets(size_);
    bool all = true;
    for (int p = 1; p < size_; ++p) {
      const char* kind = ctx.transport().linkKind(p);
      all = all && kind != nullptr && std::strcmp(kind, "shm") == 0;
    }
    Offer offer{};
    if (all) {
      try {
        segment_ = shm::Segment::create(want, 1);
        offer.bytes = want;
        std::strncpy(offer.name, segment_.name().c_str(), sizeof(offer.name) - 1);
      } catch (const Error&) {
        offer.bytes = 0;  // no shared memory to be had here (a full /dev/shm): the links, then
      }
    }
    ctx.setStep("shared arena formation", 1, 3);
    for (int p = 1; p < size_; ++p) ctx.link(p).postSend(&offer, sizeof(offer));
    for (int p = 1; p < size_; ++p) tickets[p] = ctx.link(p).postRecv(&answers[p], sizeof(uint64_t));
    for (int p = 1; p < size_; ++p) ctx.waitRecv(ctx.link(p), tickets[p]);
    uint64_t verdict = offer.bytes != 0 ? 1 : 0;
    for (int p = 1; p < size_; ++p) verdict = verdict && answers[p] == 1;
    segment_.unlink();  // every rank that could map it has: from now on no name exists
    ctx.setStep("shared arena formation", 2, 3);
    for (int p = 1; p < size_; ++p) ctx.link(p).postSend(&verdict, sizeof(verdict));
    ctx.drainSends();
    if (verdict == 0) segment_ = shm::Segment();
  } else {
    uint64_t answer = 0, verdict = 0;
    Offer offer{};
    ctx.waitRecv(ctx.link(0), ctx.link(0).postRecv(&offer, sizeof(offer)));
    if (offer.bytes == want) {
      try {
        segment_ = shm::Segment::open(std::string(offer.name, strnlen(offer.name, sizeof(offer.name))), want, 0,
                                      /*keepName=*/true);
        answer = 1;
      } catch (const Error&) {
        answer = 0;  // another IPC namespace, say: the verdict tells every rank
      }
    }
    ctx.link(0).postSend(&answer, sizeof(answer));
    ctx.waitRecv(ctx.link(0), ctx.link(0).postRecv(&verdict, sizeof(verdict)));
    ctx.drainSends();
    if (verdict == 0) segment_ = shm::Segment();
  }
  if (segment_.data() == nullptr) return false;
  mapped_.store(true, std::memory_order_release);
  return true;
}

void SharedArena::announce(const WireHeader& call) {
  WireHeader h = call;
  h.rank = rank_;
  uint64_t words[4];
  std::memcpy(words, &h, sizeof(words));
  Line& l = line(rank_);
  const uint32_t v = l.version.load(std::memory_order_relaxed);
  l.version.store(v + 1, std::memory_order_relaxed);  // odd: being written
  std::atomic_thread_fence(std::memory_order_release);
  for (int i = 0; i < 4; ++i) l.header[i].store(words[i], std::memory_order_relaxed);
  l.version.store(v + 2, std::memory_order_release);
}

void SharedArena::checkAnnounced(const WireHeader& call, int peer) const {
  Line& l = line(peer);
  const uint32_t v1 = l.version.load(std::memory_order_acquire);
  if (v1 == 0 || (v1 & 1)) return;  // nothing announced yet, or being written: the next look
  uint64_t words[4];
  for (int i = 0; i < 4; ++i) words[i] = l.header[i].load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (l.version.load(std::memory_order_relaxed) != v1) return;
  WireHeader theirs;
  std::memcpy(&theirs, words, sizeof(theirs));
  // Another sequence number: the peer is at another call (ahead, or not yet here): it
  // compares when it gets here, or this rank did when it was there.
  const auto shared = static_cast<uint8_t>(Algo::kShared);
  if (theirs.seq != call.seq || (theirs.algo != shared && call.algo != shared)) return;
  if (theirs.kind == call.kind && ownCounts(call)) {  // all else must agree
    WireHeader same = theirs;
    same.count = call.count;
    if (sameCall(call, same)) return;
  }
  checkSameCall(call, theirs, rank_);
}

void SharedArena::publish(std::atomic<uint32_t>& flag, uint32_t value) {
  flag.store(value, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (control().waiters.load(std::memory_order_relaxed) != 0) futexWakeAll(flag);
}

void SharedArena::waitArrived(Context& ctx, int peer, uint32_t round, const char* what) {
  if (reached(seenArrived_[peer], round)) return;
  waitFlag(ctx, line(peer).arrived, round, peer, what);
  seenArrived_[peer] = round;
}

void SharedArena::waitFilled(Context& ctx, int peer, uint32_t piece, const char* what) {
  waitFlag(ctx, line(peer).filled, piece, peer, what);
}

void SharedArena::waitDone(Context& ctx, int peer, uint32_t piece, const char* what) {
  waitFlag(ctx, line(peer).done, piece, peer, what);
}

void SharedArena::waitAllArrived(Context& ctx, uint32_t round, const char* what) {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    waitArrived(ctx, p, round, what);
    checkAnnounced(ctx.call, p);
  }
}

void SharedArena::waitSlotFree(Context& ctx, uint32_t round) {
  if (round < 2) return;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) waitArrived(ctx, p, round - 1, "the peers to be done with the slot");
  }
}

void SharedArena::waitFlag(Context& ctx, std::atomic<uint32_t>& flag, uint32_t value, int peer,
                           const char* what) {
  if (reached(flag.load(std::memory_order_acquire), value)) return;
  Control& c = control();
  // Spin: a peer that arrives within microseconds is seen within nanoseconds. Where this
  // host's ranks fit its cores (tunables.spinUs > 0, options.default_spin_us) the peer has
  // a core of its own: the looks keep this one, a pause apart. Where they outnumber the
  // cores the peer may need this one: a yield between rounds of looks.
  const bool ownCore = ctx.tunables.spinUs > 0;
  const auto spinEnd = Clock::now() + kSpin;
  int looks = 0;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (reached(flag.load(std::memory_order_acquire), value)) return;
      if (c.failed.load(std::memory_order_relaxed) != 0) break;  // to the failure's check below
      if (ownCore) cpuPause();
    }
    if (c.failed.load(std::memory_order_relaxed) != 0) break;
    ctx.transport().progress();  // a call may have messages of its own on links (gather_shared.cc)
    ctx.pollBackground();
    if (++looks % 4 == 0 && Clock::now() >= spinEnd) break;
    if (!ownCore) std::this_thread::yield();
  }
  // Sleep in slices; between them, what a wait on links would do.
  const bool checks = interrupt::installed();
  for (;;) {
    ctx.transport().progress();
    ctx.pollBackground();
    // A peer that failed may have raised this flag first (a root that published its verdict
    // and then found a mismatch): the flag is looked at again after the failure is seen.
    if (c.failed.load(std::memory_order_acquire) != 0) {
      if (reached(flag.load(std::memory_order_acquire), value)) return;
      throwPoisoned(ctx);
    }
    if (reached(flag.load(std::memory_order_acquire), value)) return;
    try {
      ctx.transport().checkPeers();
    } catch (const PeerLostError&) {
      if (reached(flag.load(std::memory_order_acquire), value)) return;  // it finished first
      throw;
    }
    const auto now = Clock::now();
    if (now >= ctx.deadline()) {
      throw TimeoutError(ctx.timedOut() + ctx.stepText() + " waiting for rank " + std::to_string(peer) + " (" +
                         what + ", shared-memory round " + std::to_string(value) + ")");
    }
    if (checks && interrupt::requested()) {
      throw Interrupted("interrupted by the program's signal handler (e.g. Ctrl-C, KeyboardInterrupt) "
                        "while waiting for rank " + std::to_string(peer) + " in a shared-memory call");
    }
    c.waiters.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = flag.load(std::memory_order_seq_cst);
    if (!reached(seen, value)) {
      futexWait(flag, seen, std::min<Clock::duration>(kSlice, ctx.deadline() - now));
    }
    c.waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void SharedArena::poison(const std::string& why) {
  if (!mapped_.load(std::memory_order_acquire) || !segment_.mappedHere()) return;  // a forked child: not its
  Control& c = control();
  uint32_t none = 0;
  if (!c.claimed.compare_exchange_strong(none, 1, std::memory_order_acq_rel)) return;  // another was first
  std::strncpy(c.why, why.c_str(), sizeof(c.why) - 1);
  c.failed.store(static_cast<uint32_t>(rank_) + 1, std::memory_order_release);
  for (int r = 0; r < size_; ++r) {
    futexWakeAll(line(r).arrived);
    futexWakeAll(line(r).filled);
    futexWakeAll(line(r).done);
  }
}

size_t partBlockBytes(int blocks) {
  return std::min<size_t>((sizeof(WireHeader) + kArenaPartBytes + 63) / 64 * 64, kArenaSlotBytes / blocks / 64 * 64);
}

bool partInBlock(size_t bytes, size_t block) { return bytes <= std::min(kArenaPartBytes, block - sizeof(WireHeader)); }

void putHead(const Context& ctx, SharedArena& a, uint32_t round, size_t offset, size_t count) {
  WireHeader h = ctx.call;
  h.count = count;
  h.rank = ctx.rank;
  a.put(round, offset, &h, sizeof(h));
}

void checkHead(const Context& ctx, const SharedArena& a, uint32_t round, int peer, size_t offset, size_t count) {
  WireHeader want = ctx.call, theirs;
  want.count = count;
  std::memcpy(&theirs, a.slot(peer, round) + offset, sizeof(theirs));
  checkPeerHeader(want, theirs, ctx.rank, peer);
}

void SharedArena::throwPoisoned(const Context& ctx) const {
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) checkAnnounced(ctx.call, p);
  }
  const Control& c = control();
  const int failed = static_cast<int>(c.failed.load(std::memory_order_acquire)) - 1;
  throw PeerLostError("rank " + std::to_string(failed) + " failed while this rank waited for it in a shared-memory call: " +
                      std::string(c.why, strnlen(c.why, sizeof(c.why))));
}

}  // namespace pycollect
