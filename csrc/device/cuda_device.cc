#include "device/cuda_device.h"

#include <cstring>

namespace pycollect {
namespace {

using cuda::check;

// Makes the device's context current on this thread for one call, and puts back the one
// that was current before: the calling thread may be the program's own (torch's), whose
// current context is its business.
class Current {
 public:
  Current(const cuda::Driver& d, cuda::CUcontext ctx) : d_(d) {
    check(d_.cuCtxGetCurrent(&saved_), "cuCtxGetCurrent");
    changed_ = saved_ != ctx;
    if (changed_) check(d_.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  }
  ~Current() {
    if (changed_) d_.cuCtxSetCurrent(saved_);  // nullptr (none) is valid too
  }

 private:
  const cuda::Driver& d_;
  cuda::CUcontext saved_ = nullptr;
  bool changed_ = false;
};

cuda::CUstream asStream(StreamHandle h) { return reinterpret_cast<cuda::CUstream>(h); }
cuda::CUevent asEvent(EventHandle h) { return reinterpret_cast<cuda::CUevent>(h); }
cuda::CUdeviceptr asDevicePtr(const void* p) {
  return static_cast<cuda::CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
}

}  // namespace

CudaDevice::CudaDevice(int ordinal) : d_(cuda::driver()), ordinal_(ordinal) {
  cuda::CUdevice dev = 0;
  check(d_.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  check(d_.cuDevicePrimaryCtxRetain(&ctx_, dev), "cuDevicePrimaryCtxRetain");
}

StreamHandle CudaDevice::createStream() {
  Current current(d_, ctx_);
  cuda::CUstream s = nullptr;
  // Non-blocking: no implicit sync with the legacy default stream; the order with the
  // caller's stream is made explicit with events.
  check(d_.cuStreamCreate(&s, cuda::CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return reinterpret_cast<StreamHandle>(s);
}

void CudaDevice::destroyStream(StreamHandle stream) {
  // The driver lets the work already queued on it finish, then releases it.
  Current current(d_, ctx_);
  check(d_.cuStreamDestroy(asStream(stream)), "cuStreamDestroy");
}

EventHandle CudaDevice::createEvent() {
  Current current(d_, ctx_);
  cuda::CUevent e = nullptr;
  check(d_.cuEventCreate(&e, cuda::CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  return reinterpret_cast<EventHandle>(e);
}

void CudaDevice::destroyEvent(EventHandle event) {
  Current current(d_, ctx_);
  // Safe while a stream still waits on it: the driver frees it once that is done.
  check(d_.cuEventDestroy(asEvent(event)), "cuEventDestroy");
}

void CudaDevice::copyToHost(void* host, const void* device, size_t bytes, StreamHandle stream) {
  Current current(d_, ctx_);
  check(d_.cuMemcpyDtoHAsync(host, asDevicePtr(device), bytes, asStream(stream)),
        "cuMemcpyDtoHAsync");
}

void CudaDevice::copyToDevice(void* device, const void* host, size_t bytes, StreamHandle stream) {
  Current current(d_, ctx_);
  check(d_.cuMemcpyHtoDAsync(asDevicePtr(device), host, bytes, asStream(stream)),
        "cuMemcpyHtoDAsync");
}

void CudaDevice::record(EventHandle event, StreamHandle stream) {
  Current current(d_, ctx_);
  check(d_.cuEventRecord(asEvent(event), asStream(stream)), "cuEventRecord");
}

bool CudaDevice::query(EventHandle event) {
  Current current(d_, ctx_);
  cuda::CUresult r = d_.cuEventQuery(asEvent(event));
  if (r == cuda::CUDA_ERROR_NOT_READY) return false;
  check(r, "cuEventQuery");
  return true;
}

void CudaDevice::streamWait(StreamHandle stream, EventHandle event) {
  Current current(d_, ctx_);
  check(d_.cuStreamWaitEvent(asStream(stream), asEvent(event), 0), "cuStreamWaitEvent");
}

void* CudaDevice::allocPinned(size_t bytes) {
  Current current(d_, ctx_);
  void* p = nullptr;
  check(d_.cuMemHostAlloc(&p, bytes == 0 ? 1 : bytes, 0), "cuMemHostAlloc");
  return p;
}

void CudaDevice::freePinned(void* p) {
  Current current(d_, ctx_);
  check(d_.cuMemFreeHost(p), "cuMemFreeHost");
}

uint32_t* CudaDevice::allocFlags(size_t words) {
  if (d_.cuMemHostGetDevicePointer == nullptr || d_.cuStreamWriteValue32 == nullptr ||
      d_.cuStreamWaitValue32 == nullptr) {
    return nullptr;  // an old driver: wait() blocks the host
  }
  if (flagsHost_ != nullptr) throw DeviceError(name() + ": flag words were already allocated");
  Current current(d_, ctx_);
  void* p = nullptr;
  const size_t bytes = (words == 0 ? 1 : words) * sizeof(uint32_t);
  check(d_.cuMemHostAlloc(&p, bytes, cuda::kMemHostAllocPortable | cuda::kMemHostAllocDeviceMap),
        "cuMemHostAlloc");
  std::memset(p, 0, bytes);
  cuda::CUdeviceptr dptr = 0;
  if (d_.cuMemHostGetDevicePointer(&dptr, p, 0) != cuda::CUDA_SUCCESS) {
    d_.cuMemFreeHost(p);  // the GPU cannot map host memory: wait() blocks the host
    return nullptr;
  }
  flagsHost_ = static_cast<uint32_t*>(p);
  flagsDevice_ = dptr;
  flagsWords_ = bytes / sizeof(uint32_t);
  return flagsHost_;
}

void CudaDevice::freeFlags(uint32_t* flags) {
  // Deliberately kept (4 KiB per group): a caller's stream may still hold a waitValue on
  // a word (the words were all stored first, but the GPU reads them when it gets there),
  // and freeing mapped memory under a pending wait would fault the context.
  (void)flags;
}

cuda::CUdeviceptr CudaDevice::flagAddress(const uint32_t* flag) const {
  if (flagsHost_ == nullptr || flag < flagsHost_ || flag >= flagsHost_ + flagsWords_) {
    throw DeviceError(name() + ": a flag word outside the region allocFlags made");
  }
  return flagsDevice_ + static_cast<cuda::CUdeviceptr>(flag - flagsHost_) * sizeof(uint32_t);
}

void CudaDevice::writeValue(StreamHandle stream, uint32_t* flag, uint32_t value) {
  Current current(d_, ctx_);
  check(d_.cuStreamWriteValue32(asStream(stream), flagAddress(flag), value, cuda::CU_STREAM_WRITE_VALUE_DEFAULT),
        "cuStreamWriteValue32");
}

void CudaDevice::waitValue(StreamHandle stream, uint32_t* flag, uint32_t value) {
  Current current(d_, ctx_);
  check(d_.cuStreamWaitValue32(asStream(stream), flagAddress(flag), value, cuda::CU_STREAM_WAIT_VALUE_GEQ),
        "cuStreamWaitValue32");
}

}  // namespace pycollect
