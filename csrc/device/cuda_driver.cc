#include "device/cuda_driver.h"

#include <dlfcn.h>

#include <mutex>

#include "device/device.h"

namespace pycollect {
namespace cuda {
namespace {

template <typename F>
void load(void* lib, F& slot, const char* symbol) {
  void* f = ::dlsym(lib, symbol);
  if (f == nullptr) {
    throw DeviceError(std::string("the CUDA driver (libcuda.so.1) lacks ") + symbol +
                      ": it is older than pycollect needs (CUDA 11 or newer)");
  }
  slot = reinterpret_cast<F>(f);
}

// A symbol the driver may lack: nullptr then.
template <typename F>
void loadOptional(void* lib, F& slot, const char* symbol) {
  slot = reinterpret_cast<F>(::dlsym(lib, symbol));
}

// "<call> failed: <driver's text> (CUresult n)"
std::string describe(const Driver& d, CUresult r, const char* call) {
  const char* text = nullptr;
  if (d.cuGetErrorString == nullptr || d.cuGetErrorString(r, &text) != CUDA_SUCCESS || text == nullptr) {
    text = "unknown error";
  }
  return std::string(call) + " failed: " + text + " (CUresult " + std::to_string(r) + ")";
}

Driver loadDriver() {
  // RTLD_NOLOAD first: the copy torch already loaded, if any; else load it.
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  if (lib == nullptr) lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    throw DeviceError(std::string("CUDA is not available on this machine: the NVIDIA driver library "
                                  "libcuda.so.1 could not be loaded (") +
                      (why ? why : "unknown reason") +
                      "); CUDA tensors need an NVIDIA GPU and its driver");
  }
  Driver d{};
  load(lib, d.cuInit, "cuInit");
  load(lib, d.cuDeviceGet, "cuDeviceGet");
  load(lib, d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  load(lib, d.cuCtxSetCurrent, "cuCtxSetCurrent");
  load(lib, d.cuCtxGetCurrent, "cuCtxGetCurrent");
  load(lib, d.cuStreamCreate, "cuStreamCreate");
  load(lib, d.cuStreamDestroy, "cuStreamDestroy_v2");
  load(lib, d.cuStreamWaitEvent, "cuStreamWaitEvent");
  load(lib, d.cuEventCreate, "cuEventCreate");
  load(lib, d.cuEventRecord, "cuEventRecord");
  load(lib, d.cuEventQuery, "cuEventQuery");
  load(lib, d.cuEventDestroy, "cuEventDestroy_v2");
  load(lib, d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  load(lib, d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  load(lib, d.cuMemHostAlloc, "cuMemHostAlloc");
  load(lib, d.cuMemFreeHost, "cuMemFreeHost");
  load(lib, d.cuGetErrorString, "cuGetErrorString");
  loadOptional(lib, d.cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
  loadOptional(lib, d.cuStreamWriteValue32, "cuStreamWriteValue32_v2");
  loadOptional(lib, d.cuStreamWaitValue32, "cuStreamWaitValue32_v2");
  // The library stays loaded for the life of the process (no dlclose).
  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS) {
    throw DeviceError("CUDA is not usable on this machine: " + describe(d, r, "cuInit"));
  }
  return d;
}

}  // namespace

void check(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  throw DeviceError(describe(driver(), r, call));
}

const Driver& driver() {
  // Loaded once; a failure is remembered and raised again on every call.
  static std::once_flag once;
  static Driver loaded{};
  static std::string failure;
  std::call_once(once, [] {
    try {
      loaded = loadDriver();
    } catch (const DeviceError& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw DeviceError(failure);
  return loaded;
}

}  // namespace cuda
}  // namespace pycollect
