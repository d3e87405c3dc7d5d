// Staging: a collective on device memory, run by the host algorithms through pinned
// host buffers, with the copies pipelined against the wire. See staging.cc.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/context.h"
#include "common/clock.h"
#include "common/fork.h"
#include "device/device.h"

namespace pycollect {

struct StagingOptions {
  size_t pieceBytes = 4 << 20;  // PYCOLLECT_STAGING_BYTES: most bytes one piece carries
  int slots = 3;                // pinned slots: pieces in flight at once (>= 2)
  size_t slotBytes = 0;         // each slot's size: the largest any call of the group needs
                                // (0: pieceBytes); allocated once, when staging starts
};

// One piece of a staged call. `in` copies device memory into the slot (at `offset`),
// `run` is the host algorithm on the slot, `out` copies the slot back to device memory.
struct StageCopy {
  size_t offset;  // in the slot
  char* device;
  size_t bytes;
};
struct StagedPiece {
  size_t count = 0;  // elements per rank this piece carries: the count in its headers
  std::vector<StageCopy> in, out;
  std::function<void(Context&, char* slot)> run;
};

// What outlives a staged call on the host side: the device and the flag words through
// which a caller's stream waits for calls still running (see staging.cc, "Waiting for a
// call"). Shared by Staging and its calls' Works (comm/staged_work.h), so whichever ends
// last frees it.
struct StagedSync {
  static constexpr uint32_t kWords = 1024;  // call s writes s to words[s % kWords]

  explicit StagedSync(std::shared_ptr<Device> d) : device(std::move(d)) {}
  ~StagedSync();
  StagedSync(const StagedSync&) = delete;
  StagedSync& operator=(const StagedSync&) = delete;

  uint32_t* word(uint32_t seq) const { return words + seq % kWords; }
  // The host stores call `seq`'s value itself (its copies failed, or it never ran), so a
  // stream waiting on it goes on; a word already at or past `seq` is left alone.
  void release(uint32_t seq);
  // release() of every call up to `seq` whose word could still be waited on.
  void releaseThrough(uint32_t seq);
  // Tests: number the next call `seq` + 1, with the words as calls up to `seq` left them
  // (to cross the 32-bit wrap without 2^32 calls). Only while no call is in flight.
  void restartAt(uint32_t seq);

  std::shared_ptr<Device> device;
  uint32_t* words = nullptr;  // nullptr: no stream memory operations (wait on the host)
  std::atomic<uint32_t> issued{0};  // the last call's number (0: none yet; wraps)
  fork::Owner owner;  // in a forked child the device is the parent's: left alone
};

// A staged call, as the communicator hands it to Staging::run on its worker.
struct StagedCall {
  size_t pieces = 1;     // at least one: a call of 0 elements still exchanges headers
  size_t slotBytes = 0;  // the largest slot any piece needs
  std::function<StagedPiece(size_t k)> piece;
  // Runs `body` as one collective on the wire, with headers carrying `count`.
  std::function<void(size_t count, const std::function<void(Context&)>& body)> onWire;
  EventHandle start = 0;  // recorded on the caller's stream at issue; 0: none
  EventHandle done = 0;   // recorded here after the call's last copy to the device
  uint32_t seq = 0;       // the call's number (StagedSync): its flag word's value
  Clock::time_point deadline;
  std::function<std::string()> stopReason;  // non-empty: the group failed or is closing
  std::string what;                         // the call, for error messages
};

class Staging {
 public:
  // How long a wait for a copy looks on once the call's deadline passed (waitEvent).
  static constexpr std::chrono::milliseconds kLastLook{100};
  // Makes the copy streams, the flag words (none if the device cannot: host waits then)
  // and every slot, at its full size: nothing is allocated or freed while calls run.
  Staging(std::unique_ptr<Device> device, StagingOptions options);
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  Device& device() { return *device_; }
  const std::shared_ptr<StagedSync>& sync() const { return sync_; }
  // The next call's number (any thread, at issue).
  uint32_t nextSeq() { return sync_->issued.fetch_add(1) + 1; }
  const StagingOptions& options() const { return options_; }
  // Pinned bytes held: slots x slotBytes, from construction to the end.
  size_t pinnedBytes() const { return slots_.size() * options_.slotBytes; }

  // Worker thread (or the inline caller): runs the call on the host to its end, and
  // returns once its last copies to device memory are queued: they complete later, then
  // `call.done` and the call's flag word say so. On an error, waits for the copies
  // already queued (so no copy touches the caller's memory later), stores the flag
  // words of every call so far (a stream waiting on one goes on), then raises.
  void run(const StagedCall& call);
  // The group is closing: waits (at most 10 s) for the copies in flight and stores every
  // flag word, so nothing queued by us or waiting on us outlives the group.
  void close();

 private:
  struct Slot {
    char* data = nullptr;     // options_.slotBytes of pinned memory
    EventHandle filled = 0;   // its device->host copies are done
    EventHandle drained = 0;  // its host->device copies are done
    bool draining = false;    // a host->device copy from it was queued
  };
  void issueIn(const StagedPiece& p, Slot& s);
  void waitEvent(EventHandle e, const StagedCall& call, const std::string& step);
  void drain();
  void release();  // frees what the constructor made (the destructor's, or a failed construction's)

  std::shared_ptr<Device> device_;
  std::shared_ptr<StagedSync> sync_;
  StagingOptions options_;
  StreamHandle toHost_ = 0, toDevice_ = 0;  // the copy streams, one per direction
  EventHandle marker_ = 0;                  // drain()'s: recorded on each stream in turn
  std::vector<Slot> slots_;
};

}  // namespace pycollect
