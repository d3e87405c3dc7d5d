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
// Slots. `slots` pinned buffers (3 by default) are allocated on first use, reused by
// every later call, and only grown (up to the largest slot a call needs): pinning is
// slow, and pinned memory is a scarce resource. Piece k uses slot k mod slots.
//
// Order, all kept by the device, never by a host wait on a copy in flight:
//   - both copy streams first wait for the `start` event, recorded on the caller's
//     stream when the call was issued: the call sees the work queued before it;
//   - a slot is refilled (device->host of piece k + slots) only after its previous
//     host->device copies (piece k) are done: the toHost stream waits for the slot's
//     `drained` event;
//   - the host runs piece k's algorithm only once its `filled` event completed, and
//     queues its host->device copies only after the algorithm returned.
// The call ends once the last host->device copy completed: the result is in device
// memory when its Work completes.
//
// Worked example, 10 MiB all-reduce, pieceBytes 4 MiB, 3 slots: pieces of 4, 4 and
// 2 MiB. Issue: D2H(0)->slot0, D2H(1)->slot1, D2H(2)->slot2. Piece 0: wait filled0,
// ring all-reduce of slot0 (4 MiB), H2D(0) from slot0. Piece 1: wait filled1 (done
// while piece 0 was on the wire), ring of slot1, H2D(1). Piece 2 likewise. End: wait
// for drained2 (H2D(2)); H2D(0) and H2D(1) ran behind earlier pieces.
//
// Waiting. Events are polled (yield, then 20 us sleeps) against the call's deadline;
// every kCheckEvery the group's failure (abort) and the program's signal handlers are
// asked, so a wait never outlives the group. A failed copy raises DeviceError naming
// the piece: the communicator then fails the group, which closes the links, so every
// other rank's call fails within milliseconds too.
#include "comm/staging.h"

#include <thread>

#include "common/interrupt.h"

namespace pycollect {

Staging::Staging(std::unique_ptr<Device> device, StagingOptions options)
    : device_(std::move(device)), options_(options) {
  if (options_.slots < 2) options_.slots = 2;
}

Staging::~Staging() {
  try {
    drain();
  } catch (...) {
  }
  for (Slot& s : slots_) {
    try {
      if (s.data != nullptr) device_->freePinned(s.data);
      if (s.filled != 0) device_->destroyEvent(s.filled);
      if (s.drained != 0) device_->destroyEvent(s.drained);
    } catch (...) {
      // A device that failed keeps its memory; nothing more can be done at teardown.
    }
  }
}

void Staging::prepare(size_t slotBytes, size_t count) {
  if (!streams_) {
    toHost_ = device_->createStream();
    toDevice_ = device_->createStream();
    streams_ = true;
  }
  while (slots_.size() < count) {
    Slot s;
    s.filled = device_->createEvent();
    s.drained = device_->createEvent();
    slots_.push_back(s);
  }
  for (size_t i = 0; i < count; ++i) {
    Slot& s = slots_[i];
    if (s.bytes >= slotBytes) continue;
    if (s.data != nullptr) {
      // Its last copies finished with the call that used it (run() ends drained).
      device_->freePinned(s.data);
      pinnedBytes_ -= s.bytes;
      s.data = nullptr;
      s.bytes = 0;
    }
    s.data = static_cast<char*>(device_->allocPinned(slotBytes));
    s.bytes = slotBytes;
    pinnedBytes_ += slotBytes;
  }
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
  for (;;) {
    try {
      if (device_->query(e)) return;
    } catch (const DeviceError& err) {
      throw DeviceError(call.what + ": " + step + " failed on " + device_->name() + ": " + err.what());
    }
    auto now = Clock::now();
    if (now >= call.deadline) {
      throw TimeoutError(call.what + " timed out waiting for " + device_->name() + " to " + step);
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

void Staging::drain() {
  // Waits (at most 10 s, errors ignored) until every copy queued on our streams is done.
  if (!streams_ || slots_.empty()) return;
  auto until = Clock::now() + std::chrono::seconds(10);
  for (StreamHandle s : {toHost_, toDevice_}) {
    EventHandle e = slots_[0].filled;  // reused as a marker: the call is over
    device_->record(e, s);
    for (;;) {
      bool done = true;
      try {
        done = device_->query(e);
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
  prepare(call.slotBytes, depth);
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
    // Every slot's last copies: the result is in device memory when we return.
    for (size_t i = 0; i < depth; ++i) {
      if (slots_[i].draining) waitEvent(slots_[i].drained, call, "copy the result to the device");
      slots_[i].draining = false;
    }
  } catch (const DeviceError& e) {
    drain();  // no queued copy may touch the caller's memory once the call has failed
    // A failure while queueing (an invalid pointer, a sticky error) names the call too.
    if (std::string(e.what()).rfind(call.what, 0) == 0) throw;
    throw DeviceError(call.what + ": " + e.what());
  } catch (...) {
    drain();
    throw;
  }
}

}  // namespace pycollect
