// Staging: a collective on device memory, run by the host algorithms through pinned
// host buffers, with the copies pipelined against the wire. See staging.cc.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/context.h"
#include "common/clock.h"
#include "device/device.h"

namespace pycollect {

struct StagingOptions {
  size_t pieceBytes = 4 << 20;  // PYCOLLECT_STAGING_BYTES: most bytes one slot holds
  int slots = 3;                // pinned slots: pieces in flight at once (>= 2)
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

// A staged call, as the communicator hands it to Staging::run on its worker.
struct StagedCall {
  size_t pieces = 1;     // at least one: a call of 0 elements still exchanges headers
  size_t slotBytes = 0;  // the largest slot any piece needs
  std::function<StagedPiece(size_t k)> piece;
  // Runs `body` as one collective on the wire, with headers carrying `count`.
  std::function<void(size_t count, const std::function<void(Context&)>& body)> onWire;
  EventHandle start = 0;  // recorded on the caller's stream at issue; 0: none
  Clock::time_point deadline;
  std::function<std::string()> stopReason;  // non-empty: the group failed or is closing
  std::string what;                         // the call, for error messages
};

class Staging {
 public:
  Staging(std::unique_ptr<Device> device, StagingOptions options);
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  Device& device() { return *device_; }
  const StagingOptions& options() const { return options_; }
  // Pinned bytes held now (at most slots x the largest slot asked for).
  size_t pinnedBytes() const { return pinnedBytes_; }

  // Worker thread (or the inline caller): runs the call to the end, its last copy to
  // device memory included. On an error, waits for the copies already queued (so no
  // copy touches the caller's memory later), then raises.
  void run(const StagedCall& call);

 private:
  struct Slot {
    char* data = nullptr;
    size_t bytes = 0;
    EventHandle filled = 0;   // its device->host copies are done
    EventHandle drained = 0;  // its host->device copies are done
    bool draining = false;    // a host->device copy from it was queued
  };
  void prepare(size_t slotBytes, size_t slots);
  void issueIn(const StagedPiece& p, Slot& s);
  void waitEvent(EventHandle e, const StagedCall& call, const std::string& step);
  void drain();

  std::unique_ptr<Device> device_;
  StagingOptions options_;
  bool streams_ = false;                    // toHost_ and toDevice_ made
  StreamHandle toHost_ = 0, toDevice_ = 0;  // the copy streams, one per direction
  std::vector<Slot> slots_;
  size_t pinnedBytes_ = 0;
};

}  // namespace pycollect
