// CudaDevice: the Device interface over the CUDA driver (cuda_driver.h) for one GPU.
//
// It works in the device's primary context, the one the CUDA runtime (and so torch)
// uses, so the streams torch hands out (torch.cuda.current_stream().cuda_stream) are
// valid handles here, and memory torch allocated is addressable by our copies.
// Every call makes that context current on the calling thread for its duration, and
// then restores the thread's previous one.
//
// Flag words (stream memory operations) are mapped pinned memory: cuMemHostAlloc with
// DEVICEMAP, whose device address cuMemHostGetDevicePointer gives (the documented way,
// whatever the unified addressing); cuStreamWriteValue32 / cuStreamWaitValue32 take it.
#pragma once

#include "device/cuda_driver.h"
#include "device/device.h"

namespace pycollect {

class CudaDevice : public Device {
 public:
  explicit CudaDevice(int ordinal);  // raises DeviceError if CUDA or the GPU is missing

  std::string name() const override { return "cuda:" + std::to_string(ordinal_); }
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

 private:
  cuda::CUdeviceptr flagAddress(const uint32_t* flag) const;

  const cuda::Driver& d_;
  const int ordinal_;
  cuda::CUcontext ctx_ = nullptr;  // retained for the life of the process, never released:
                                   // torch shares it, and releasing at exit races its teardown
  // allocFlags' one region: its host address, device address and size.
  uint32_t* flagsHost_ = nullptr;
  cuda::CUdeviceptr flagsDevice_ = 0;
  size_t flagsWords_ = 0;
};

}  // namespace pycollect
