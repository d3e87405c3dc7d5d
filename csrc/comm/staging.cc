// Staging: collectives on device (GPU) memory, run by the host algorithms.
//
// The idea. The engine's algorithms work on host memory. A call on device memory is
// cut into pieces of at most `pieceBytes` (PYCOLLECT_STAGING_BYTES, 4 MiB by default);
// each piece goes device -> pinned host slot -> the host algorithm on the wire ->
// slot -> device. Pieces overlap: while piece k is on the wire, the device->host
// copies of the next pieces already run on one copy stream, and the host->device
// copies of the pieces before it on another (a GPU has a copy engine per direction).
// Every rank cuts a call identically (same size, dtype, group size and pieceBytes), and
// each piece is an ordinary collective whose headers carry the piece's count, so
// ranks that cut differently fail with a MismatchError instead of mixing bytes.
//
// Slots. `slots` pinned buffers (3 by default) are allocated when the group's first
// staged call is issued, each at the largest size any call of the group can need
// (slotBytes: about pieceBytes), and reused by every later call; they are freed only
// when the group ends. Never while calls run: cuMemFreeHost synchronises the whole
// device, and a caller's stream may by then wait on a flag word that only this worker
// will write (a call queued behind the one being prepared), which would deadlock.
// Piece k uses slot k mod slots.
//
// Order, all kept by the device, never by a host wait on a copy in flight:
//   - both copy streams first wait for the `start` event, recorded on the caller's
//     stream when the call was issued: the call sees the work queued before it;
//   - a slot is refilled (device->host of piece k + slots) only after its previous
//     host->device copies (piece k) are done: the toHost stream waits for the slot's
//     `drained` event;
//   - the host runs piece k's algorithm only once its `filled` event completed, and
//     queues its host->device copies only after the algorithm returned.
// The call ends on the host once its last host->device copies are queued; the device
// finishes them later (see "Waiting for a call" below).
//
// Worked example, 10 MiB all-reduce, pieceBytes 4 MiB, 3 slots: pieces of 4, 4 and
// 2 MiB. Issue: D2H(0)->slot0, D2H(1)->slot1, D2H(2)->slot2. Piece 0: wait filled0,
// ring all-reduce of slot0 (4 MiB), H2D(0) from slot0. Piece 1: wait filled1 (done
// while piece 0 was on the wire), ring of slot1, H2D(1). Piece 2 likewise. End: record
// `done` after H2D(2) and queue "word[seq % 1024] = seq" behind it; the worker moves on
// to the next call while H2D(2) still runs.
//
// Waiting for a call, host-free (as NCCL's wait()). A caller's stream must wait for a
// call that may still be on the wire, so its `done` event is not recorded yet and no
// event can express the wait. Instead each call has a number `seq` (given at issue, one
// 32-bit counter per group, wrapping) and the toDevice stream stores seq into flag word
// seq % 1024 (pinned host memory) after the call's last copy; wait() queues "wait until
// that word >= seq" (the cyclic comparison of CU_STREAM_WAIT_VALUE_GEQ, so the wrap past
// 2^32 is harmless) on the caller's stream and returns. A word per call (not one
// counter) means a word is only ever raised: its writers are calls s, s + 1024,
// s + 2048, ... in that order, and a later value still releases s's waiters; a host
// store for a failed call can never be undone by an earlier call's late write. Once
// the call ended on the host, wait() uses the `done` event instead (a dependency the
// device's scheduler sees). A failed call never reaches its write: the host stores
// the words itself, after draining our streams (run's error path, and a Work failed
// without running: comm/staged_work.cc), so a waiting stream never hangs. A device
// without stream memory operations (an old driver) has no words: wait() blocks the host.
// NVIDIA's caveat: an order made through such words is invisible to the driver's
// scheduler, which could in principle put our copies behind the caller's blocked wait
// in a shared hardware queue; PYCOLLECT_BLOCKING_WAIT=1 is the way out if it ever does.
//
// Slots are reused by the next call through their `drained` events, on the device.
//
// Host waits. Events are polled (yield, then 20 us sleeps) against the call's deadline;
// every kCheckEvery the group's failure (abort) and the program's signal handlers are
// asked, so a wait never outlives the group. A failed copy raises DeviceError naming
// the piece: the communicator then fails the group, which closes the links, so every
// other rank's call fails within milliseconds too.
#include "comm/staging.h"

#include <functional>
#include <thread>

#include "common/interrupt.h"

namespace pycollect {

StagedSync::~StagedSync() {
  if (!owner.here()) return;
  try {
    if (words != nullptr) device->freeFlags(words);
  } catch (...) {
  }
}

void StagedSync::release(uint32_t seq) {
  if (words == nullptr) return;
  uint32_t* w = word(seq);
  uint32_t now = flagLoad(w);
  while (!flagReached(now, seq) &&
         !__atomic_compare_exchange_n(w, &now, seq, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
  }
}

void StagedSync::restartAt(uint32_t seq) {
  if (words == nullptr) return;
  for (uint32_t k = 0; k < kWords; ++k) flagStore(word(seq - k), seq - k);
  issued.store(seq);
}

void StagedSync::releaseThrough(uint32_t seq) {
  for (uint32_t k = 0; k < kWords; ++k) release(seq - k);  // release() skips words already past
}

Staging::Staging(std::unique_ptr<Device> device, StagingOptions options)
    : device_(std::move(device)), sync_(std::make_shared<StagedSync>(device_)), options_(options) {
  if (options_.slots < 2) options_.slots = 2;
  if (options_.slotBytes == 0) options_.slotBytes = options_.pieceBytes;
  try {
    toHost_ = device_->createStream();
    toDevice_ = device_->createStream();
    marker_ = device_->createEvent();
    for (int i = 0; i < options_.slots; ++i) {
      slots_.emplace_back();
      Slot& s = slots_.back();
      s.filled = device_->createEvent();
      s.drained = device_->createEvent();
      s.data = static_cast<char*>(device_->allocPinned(options_.slotBytes));
    }
  } catch (...) {
    release();
    throw;
  }
  try {
    sync_->words = device_->allocFlags(StagedSync::kWords);
  } catch (const DeviceError&) {
    sync_->words = nullptr;  // no words to wait on: wait() blocks the host instead
  }
  if (sync_->words != nullptr) {
    // Word 0 is call 0's, which never exists: writing and waiting on it changes nothing,
    // but finds a driver that has the entry points and refuses them (not supported).
    try {
      device_->writeValue(toDevice_, sync_->words, 0);
      device_->waitValue(toDevice_, sync_->words, 0);
    } catch (const DeviceError&) {
      device_->freeFlags(sync_->words);
      sync_->words = nullptr;
    }
  }
}

Staging::~Staging() {
  try {
    close();
  } catch (...) {
  }
  release();
}

void Staging::release() {
  // Each piece on its own: a device that failed keeps what it refuses to free, and
  // nothing more can be done at teardown.
  auto quietly = [](const std::function<void()>& f) {
    try {
      f();
    } catch (...) {
    }
  };
  for (Slot& s : slots_) {
    if (s.data != nullptr) quietly([&] { device_->freePinned(s.data); });
    if (s.filled != 0) quietly([&] { device_->destroyEvent(s.filled); });
    if (s.drained != 0) quietly([&] { device_->destroyEvent(s.drained); });
  }
  slots_.clear();
  if (marker_ != 0) quietly([&] { device_->destroyEvent(marker_); });
  for (StreamHandle s : {toHost_, toDevice_}) {
    if (s != 0) quietly([&] { device_->destroyStream(s); });
  }
  marker_ = toHost_ = toDevice_ = 0;
}

void Staging::issueIn(const StagedPiece& p, Slot& s) {
  // The slot's previous host->device copies must be done before it is overwritten.
  if (s.draining) device_->streamWait(toHost_, s.drained);
  for (const StageCopy& c : p.in) {
    if (c.bytes > 0) device_->copyToHost(s.data + c.offset, c.device, c.bytes, toHost_);
  }
  device_->record(s.filled, toHost_);
}

void Staging::waitEvent(EventHandle e, const StagedCall& call, const std::string& step) {
  auto nextCheck = Clock::now() + interrupt::kCheckEvery;
  int polls = 0;
  Clock::time_point lastLook{};  // set once the deadline passed
  for (;;) {
    try {
      if (device_->query(e)) return;
    } catch (const DeviceError& err) {
      throw DeviceError(call.what + ": " + step + " failed on " + device_->name() + ": " + err.what());
    }
    auto now = Clock::now();
    if (now >= call.deadline) {
      // A local copy gets a last look first: a process stopped past its deadline (SIGSTOP,
      // a debugger) resumes with its copy threads, which finish the copy at once, and the
      // call then meets the real cause on the wire (a peer that gave up on it) instead of
      // blaming the copy.
      if (lastLook == Clock::time_point{}) lastLook = now + kLastLook;
      if (now >= lastLook) {
        throw TimeoutError(call.what + " timed out waiting for " + device_->name() + " to " + step);
      }
    }
    if (now >= nextCheck) {
      std::string why = call.stopReason ? call.stopReason() : std::string();
      if (!why.empty()) throw GroupFailedError(call.what + " stopped while waiting to " + step + ": " + why);
      if (interrupt::installed() && interrupt::requested()) {
        throw Interrupted("interrupted by the program's signal handler while " + call.what +
                          " waited to " + step);
      }
      nextCheck = now + interrupt::kCheckEvery;
    }
    if (++polls < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

void Staging::close() {
  drain();
  sync_->releaseThrough(sync_->issued.load());
}

void Staging::drain() {
  // Waits (at most 10 s, errors ignored) until every copy queued on our streams is done.
  auto until = Clock::now() + std::chrono::seconds(10);
  // A device with a sticky error refuses the record too: then nothing more runs on it,
  // and the caller's error (which names its call) must not be replaced by this one.
  for (StreamHandle s : {toHost_, toDevice_}) {
    if (s == 0) continue;
    try {
      device_->record(marker_, s);
    } catch (const DeviceError&) {
      continue;
    }
    for (;;) {
      bool done = true;
      try {
        done = device_->query(marker_);
      } catch (const DeviceError&) {
      }
      if (done || Clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  for (Slot& s : slots_) s.draining = false;
}

void Staging::run(const StagedCall& call) {
  const size_t n = call.pieces;
  const size_t depth = std::min<size_t>(n, options_.slots);
  if (call.slotBytes > options_.slotBytes) {
    drain();
    throw Error(call.what + ": a piece needs a staging slot of " + std::to_string(call.slotBytes) +
                " bytes, but the slots hold " + std::to_string(options_.slotBytes) + " (a bug in the cut)");
  }
  try {
    if (call.start != 0) {
      device_->streamWait(toHost_, call.start);
      device_->streamWait(toDevice_, call.start);
    }
    std::vector<StagedPiece> ahead(depth);  // the pieces whose slots are in use, by slot
    for (size_t k = 0; k < depth; ++k) {
      ahead[k] = call.piece(k);
      issueIn(ahead[k], slots_[k]);
    }
    for (size_t k = 0; k < n; ++k) {
      Slot& s = slots_[k % depth];
      StagedPiece& p = ahead[k % depth];
      const std::string of = " piece " + std::to_string(k + 1) + "/" + std::to_string(n);
      waitEvent(s.filled, call, "copy to the host" + of);
      call.onWire(p.count, [&](Context& ctx) { p.run(ctx, s.data); });
      for (const StageCopy& c : p.out) {
        if (c.bytes > 0) device_->copyToDevice(c.device, s.data + c.offset, c.bytes, toDevice_);
      }
      device_->record(s.drained, toDevice_);
      s.draining = true;
      if (k + depth < n) {
        p = call.piece(k + depth);
        issueIn(p, s);
      }
    }
    // The call's end on the device, reached once its last copies completed.
    if (call.done != 0) device_->record(call.done, toDevice_);
    if (sync_->words != nullptr) device_->writeValue(toDevice_, sync_->word(call.seq), call.seq);
  } catch (const DeviceError& e) {
    // No queued copy may touch the caller's memory once the call has failed. The flag words
    // of this call and of those before it whose writes the failure skipped are stored by its
    // Work (StagedWork::finished) once the group has recorded the failure: a caller whose
    // stream goes on then finds the group failed, not a next call accepted in between.
    drain();
    // A failure while queueing (an invalid pointer, a sticky error) names the call too.
    if (std::string(e.what()).rfind(call.what, 0) == 0) throw;
    throw DeviceError(call.what + ": " + e.what());
  } catch (...) {
    drain();  // as above
    throw;
  }
}

}  // namespace pycollect
