// HostDevice: the Device interface on the CPU, asynchronous like a GPU, for tests.
//
// Each stream is a FIFO of tasks run by its own thread: a copy is a memcpy that
// happens later (after `copyDelayUs`, to make reordering bugs show), an event record
// completes when the thread reaches it, a stream wait blocks that thread until the
// event's record completes, a writeValue stores its word when the thread reaches it, a
// waitValue polls the word (50 us sleeps) and gives up when the device is destroyed, so
// a stream never outlives it. "Device memory" is ordinary host memory.
//
// failCopy = N > 0 makes the N-th copy of this device fail: its stream is then
// broken, so every later copy on it is skipped and every event recorded on it
// reports the failure. With stickyErrors the failure is the whole device's, as a CUDA
// context's sticky error is: from then on every call (a copy, a record, a query, a
// stream wait) raises it. failFlags makes allocFlags fail (a driver that cannot map
// host memory for the flag words).
//
// As cuMemFreeHost, freePinned first waits until every stream ran what was queued on
// it; a stream that never gets there (it waits on a flag word only the caller could
// write: a deadlock on a GPU) makes it raise DeviceError after kSyncLimitMs instead.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "device/device.h"

namespace pycollect {

struct HostDeviceOptions {
  int copyDelayUs = 0;  // each copy sleeps this long before it runs
  uint64_t failCopy = 0;  // 1-based index of the copy that fails; 0: none
  bool stickyErrors = false;  // a failed copy fails every later call on the device
  bool failFlags = false;     // allocFlags raises DeviceError
  // The torch backend's wait() orders the host device's stream 0 (the caller's) after a
  // call and returns, as on CUDA; false: it blocks the host (a test reads CPU tensors).
  bool streamWait = false;
};

class HostDevice : public Device {
 public:
  explicit HostDevice(HostDeviceOptions options);
  ~HostDevice() override;

  std::string name() const override { return "host"; }
  StreamHandle createStream() override;
  void destroyStream(StreamHandle stream) override;
  EventHandle createEvent() override;
  void destroyEvent(EventHandle event) override;
  void copyToHost(void* host, const void* device, size_t bytes, StreamHandle stream) override;
  void copyToDevice(void* device, const void* host, size_t bytes, StreamHandle stream) override;
  void record(EventHandle event, StreamHandle stream) override;
  bool query(EventHandle event) override;
  void streamWait(StreamHandle stream, EventHandle event) override;
  void* allocPinned(size_t bytes) override;
  void freePinned(void* p) override;
  uint32_t* allocFlags(size_t words) override;
  void freeFlags(uint32_t* flags) override;
  void writeValue(StreamHandle stream, uint32_t* flag, uint32_t value) override;
  void waitValue(StreamHandle stream, uint32_t* flag, uint32_t value) override;

  // Test hook: queue, on `stream`, a fill of `bytes` at `device` with `value` after a
  // sleep of `delayUs`: work "already queued by the caller" that a collective must wait for.
  void fill(void* device, size_t bytes, int value, int delayUs, StreamHandle stream);
  // Test hooks: queue a plain memcpy on `stream` (work the caller queues after a wait;
  // not a counted copy, so failCopy and copyDelayUs leave it alone), and block the host
  // until `stream` ran everything queued so far.
  void snapshot(void* dst, const void* src, size_t bytes, StreamHandle stream);
  void synchronize(StreamHandle stream);

  // Tests: streams made by createStream and ended by destroyStream, by every host device
  // of this process so far (a device that leaks its streams shows a difference).
  static std::pair<uint64_t, uint64_t> streamCounts();

  static constexpr int kSyncLimitMs = 5000;  // freePinned's wait for an idle device

  struct Stream;
  struct Mark;

 private:
  Stream& stream(StreamHandle handle);  // raises the sticky error, if the device has one
  void throwIfSticky() const;  // under mu_
  void synchronizeAll(const char* what);  // every stream ran what is queued (bounded)
  void copy(void* dst, const void* src, size_t bytes, StreamHandle stream);

  const HostDeviceOptions options_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Stream>> streams_;  // handle h is streams_[h]; 0: the default;
                                                  // nullptr once destroyed
  std::vector<std::shared_ptr<Mark>> events_;     // handle h is events_[h - 1]: its last record
  uint64_t copies_ = 0;                            // copies queued so far (under mu_)
  std::string sticky_;                             // stickyErrors: the first failure (under mu_)
  std::vector<uint32_t*> flags_;  // allocFlags' memory: freed once the stream threads ended
};

}  // namespace pycollect
