// The Work of a staged call (comm/staging.h): what wait() needs to make the caller's
// stream wait for the call without blocking the host, as NCCL's wait() does.
//
//   streamWait(stream)  the stream waits for the result: on the call's `done` event once
//                       the call ended on the host, else on its flag word (staging.cc,
//                       "Waiting for a call"); returns at once
//   deviceDone()        the result is in device memory (polls the `done` event)
//
// A call that fails, on the host or before it ran, has its flag word stored by the host
// (finished()), so a stream that waits on it goes on; its error is the Work's.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "comm/staging.h"
#include "comm/work.h"

namespace pycollect {

// One staged call's number and `done` event, shared by its Work and the run on the worker.
struct StagedTicket {
  explicit StagedTicket(std::shared_ptr<StagedSync> s);  // numbers the call, makes the event
  ~StagedTicket();                                       // destroys the event
  StagedTicket(const StagedTicket&) = delete;
  StagedTicket& operator=(const StagedTicket&) = delete;

  std::shared_ptr<StagedSync> sync;
  uint32_t seq = 0;
  EventHandle done = 0;
  std::atomic<bool> ran{false};  // the worker began it (a failure then skipped earlier calls' writes too)
};

class StagedWork : public Work {
 public:
  StagedWork(std::string what, std::shared_ptr<StagedTicket> ticket)
      : Work(std::move(what)), ticket_(std::move(ticket)) {}

  // Makes `stream` wait for the result (no host wait). Returns false, queueing nothing,
  // when the call still runs on the host and the device has no stream memory operations:
  // the caller then waits on the host. Raises the call's error if it already failed.
  bool streamWait(StreamHandle stream);
  // True once the result is in device memory. Raises the call's error if it failed, and
  // DeviceError if its last copies failed on the device (after the call ended on the
  // host); the host then stores its flag word.
  bool deviceDone();
  // Polls deviceDone() until it holds (true) or `timeoutSec` passed (false; < 0: no limit).
  bool waitDevice(double timeoutSec);
  uint32_t seq() const { return ticket_->seq; }

 protected:
  void finished(bool failed) override;

 private:
  std::shared_ptr<StagedTicket> ticket_;
};

}  // namespace pycollect
