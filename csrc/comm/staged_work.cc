#include "comm/staged_work.h"

#include <chrono>
#include <thread>

#include "common/clock.h"

namespace pycollect {

StagedTicket::StagedTicket(std::shared_ptr<StagedSync> s) : sync(std::move(s)) {
  seq = sync->issued.fetch_add(1) + 1;
  done = sync->device->createEvent();
}

StagedTicket::~StagedTicket() {
  if (!sync->owner.here()) return;  // a forked child: the device (its locks) is the parent's
  try {
    sync->device->destroyEvent(done);
  } catch (...) {
  }
}

void StagedWork::finished(bool failed) {
  // Failed on the host or never run: no copy of it writes its word, and a failure while it
  // ran (run() drained the streams) skipped the writes of the calls before it too. The
  // group recorded its failure before this (Communicator::failRunning), so a caller whose
  // stream goes on here finds the group failed.
  if (!failed) return;
  if (ticket_->ran.load()) {
    ticket_->sync->releaseThrough(ticket_->seq);
  } else {
    ticket_->sync->release(ticket_->seq);
  }
}

bool StagedWork::streamWait(StreamHandle stream) {
  ticket_->sync->owner.check("this CUDA call's process group");  // the device is the parent's
  Device& d = *ticket_->sync->device;
  if (isCompleted()) {
    wait(0);  // raises the call's error
    d.streamWait(stream, ticket_->done);
    return true;
  }
  uint32_t* words = ticket_->sync->words;
  if (words == nullptr) return false;
  d.waitValue(stream, ticket_->sync->word(ticket_->seq), ticket_->seq);
  return true;
}

bool StagedWork::deviceDone() {
  if (!ticket_->sync->owner.here()) return true;  // a forked child: nothing of it runs here
  if (!isCompleted()) return false;
  wait(0);  // raises the call's error
  try {
    return ticket_->sync->device->query(ticket_->done);
  } catch (const DeviceError& e) {
    ticket_->sync->release(ticket_->seq);  // its write will never run
    throw DeviceError(what() + ": a copy of the result to the device failed: " + e.what());
  }
}

bool StagedWork::waitDevice(double timeoutSec) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(timeoutSec < 0 ? 0 : timeoutSec));
  int polls = 0;
  for (;;) {
    if (deviceDone()) return true;
    if (timeoutSec >= 0 && Clock::now() >= until) return false;
    if (++polls < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

}  // namespace pycollect
