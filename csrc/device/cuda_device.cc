#include "device/cuda_device.h"

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

}  // namespace pycollect
