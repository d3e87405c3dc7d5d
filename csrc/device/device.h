// The few things staging needs from an accelerator (comm/staging.h): streams that run
// copies in order, events that mark a point in a stream, and pinned host memory.
//
// Stream memory operations (writeValue / waitValue) let a stream wait for a point that
// another stream has not reached yet, which an event cannot express before it is
// recorded: staging uses them so that wait() on a call still on the wire makes the
// caller's stream wait, host-free (comm/staging.cc).
//
// Two implementations: CudaDevice (cuda_device.cc, over the driver API loaded at run
// time) and HostDevice (host_device.cc, a stand-in that behaves like an asynchronous
// device on the CPU, so the staging pipeline is tested without a GPU).
//
// Handles are integers: a stream handle is what the caller's framework hands out
// (torch's `cuda_stream`), 0 being the device's default stream. Every method may be
// called from any thread; errors raise DeviceError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"

namespace pycollect {

// A device call failed (a copy, an event, loading the driver): the message names it.
class DeviceError : public Error {
 public:
  using Error::Error;
};

using StreamHandle = uintptr_t;
using EventHandle = uintptr_t;

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;  // "cuda:0", "host"

  virtual StreamHandle createStream() = 0;
  virtual void destroyStream(StreamHandle stream) = 0;  // after the work queued on it
  virtual EventHandle createEvent() = 0;
  virtual void destroyEvent(EventHandle event) = 0;

  // Copies queued on `stream`, run after what was queued there before.
  virtual void copyToHost(void* host, const void* device, size_t bytes, StreamHandle stream) = 0;
  virtual void copyToDevice(void* device, const void* host, size_t bytes, StreamHandle stream) = 0;

  // `event` completes when `stream` reaches this point (a new record replaces the old).
  virtual void record(EventHandle event, StreamHandle stream) = 0;
  // True once the event's last record completed (or it was never recorded); raises
  // DeviceError if the work before it failed.
  virtual bool query(EventHandle event) = 0;
  // Later work on `stream` waits for the event's current record (no host wait).
  virtual void streamWait(StreamHandle stream, EventHandle event) = 0;

  // Page-locked host memory, which the device copies from and to asynchronously.
  virtual void* allocPinned(size_t bytes) = 0;
  virtual void freePinned(void* p) = 0;

  // `words` zeroed 32-bit words of pinned host memory that streams can write and wait on,
  // or nullptr when this device has no stream memory operations (callers then wait on the
  // host). The host reads and stores them with atomics (flagLoad / flagStore).
  virtual uint32_t* allocFlags(size_t words) = 0;
  virtual void freeFlags(uint32_t* flags) = 0;
  // When `stream` reaches this point, *flag = value (after the work queued before it).
  virtual void writeValue(StreamHandle stream, uint32_t* flag, uint32_t value) = 0;
  // Later work on `stream` waits until flagReached(*flag, value) (no host wait).
  virtual void waitValue(StreamHandle stream, uint32_t* flag, uint32_t value) = 0;
};

// CU_STREAM_WAIT_VALUE_GEQ's test: (int32_t)(word - value) >= 0, a cyclic comparison, so a
// counter that wraps past 2^32 still compares right while values are < 2^31 apart.
inline bool flagReached(uint32_t word, uint32_t value) {
  return static_cast<int32_t>(word - value) >= 0;
}
inline uint32_t flagLoad(const uint32_t* flag) { return __atomic_load_n(flag, __ATOMIC_ACQUIRE); }
inline void flagStore(uint32_t* flag, uint32_t value) { __atomic_store_n(flag, value, __ATOMIC_RELEASE); }

}  // namespace pycollect
