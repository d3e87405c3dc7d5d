// The CUDA driver API, loaded at run time: dlopen("libcuda.so.1") and dlsym of the
// entry points staging uses. No CUDA header or toolkit is needed to build, so
// one wheel serves machines with and without a GPU; the driver ships with the GPU's
// kernel module, which every CUDA program (torch included) loads the same way.
//
// The types and constants below are declared here from NVIDIA's driver API
// documentation (cuda.h of CUDA 12/13): opaque handles are pointers, CUdeviceptr is a
// 64-bit integer, CUresult an int where 0 is success and 600 "not ready".
// Where cuda.h maps a name to a versioned symbol (cuMemcpyDtoHAsync ->
// cuMemcpyDtoHAsync_v2, cuEventDestroy -> cuEventDestroy_v2, ...), the versioned
// symbol is the one loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pycollect {
namespace cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;
constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
constexpr unsigned kMemHostAllocPortable = 0x1;   // CU_MEMHOSTALLOC_PORTABLE (a macro in cuda.h)
constexpr unsigned kMemHostAllocDeviceMap = 0x2;  // CU_MEMHOSTALLOC_DEVICEMAP (a macro in cuda.h)
constexpr unsigned CU_STREAM_WAIT_VALUE_GEQ = 0x0;       // (int32_t)(*addr - value) >= 0
constexpr unsigned CU_STREAM_WRITE_VALUE_DEFAULT = 0x0;  // with a memory fence before the write

struct Driver {
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice device);
  CUresult (*cuCtxSetCurrent)(CUcontext ctx);
  CUresult (*cuCtxGetCurrent)(CUcontext* ctx);
  CUresult (*cuStreamCreate)(CUstream* stream, unsigned flags);
  CUresult (*cuStreamDestroy)(CUstream stream);              // cuStreamDestroy_v2
  CUresult (*cuStreamWaitEvent)(CUstream stream, CUevent event, unsigned flags);
  CUresult (*cuEventCreate)(CUevent* event, unsigned flags);
  CUresult (*cuEventRecord)(CUevent event, CUstream stream);
  CUresult (*cuEventQuery)(CUevent event);
  CUresult (*cuEventDestroy)(CUevent event);                 // cuEventDestroy_v2
  CUresult (*cuMemcpyDtoHAsync)(void* dst, CUdeviceptr src, size_t bytes,
                                CUstream stream);           // cuMemcpyDtoHAsync_v2
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void* src, size_t bytes,
                                CUstream stream);           // cuMemcpyHtoDAsync_v2
  CUresult (*cuMemHostAlloc)(void** p, size_t bytes, unsigned flags);
  CUresult (*cuMemFreeHost)(void* p);
  CUresult (*cuGetErrorString)(CUresult error, const char** text);
  // Optional: nullptr where this driver lacks them (stream memory operations came with
  // the _v2 symbols of CUDA 11.7); staging's wait() then blocks the host instead.
  CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr* dptr, void* p,
                                        unsigned flags);  // cuMemHostGetDevicePointer_v2
  CUresult (*cuStreamWriteValue32)(CUstream stream, CUdeviceptr addr, uint32_t value,
                                   unsigned flags);  // cuStreamWriteValue32_v2
  CUresult (*cuStreamWaitValue32)(CUstream stream, CUdeviceptr addr, uint32_t value,
                                  unsigned flags);  // cuStreamWaitValue32_v2
};

// The loaded driver, loaded on first use (thread-safe); raises DeviceError naming
// what is missing (no libcuda.so.1: "CUDA is not available on this machine ...").
const Driver& driver();

// Raises DeviceError("<call> failed: <driver's text> (CUresult n)") unless r is success.
void check(CUresult r, const char* call);

}  // namespace cuda
}  // namespace pycollect
