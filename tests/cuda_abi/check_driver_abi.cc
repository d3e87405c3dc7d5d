// Compile-only check (tests/test_staging.py::test_device_driver_abi_matches_cuda_h): the
// driver entry points and constants declared in csrc/device/cuda_driver.h match NVIDIA's
// cuda.h, symbol by symbol (the versioned _v2 ones where cuda.h maps to them).
// Built only where a CUDA toolkit's cuda.h exists; never part of the package.
#include <cuda.h>

#include <type_traits>

#include "device/cuda_driver.h"

namespace d = pycollect::cuda;

#define SAME_TYPE(field, symbol)                                                           \
  static_assert(sizeof(decltype(&::symbol)) == sizeof(decltype(d::Driver::field)), #symbol); \
  static_assert(std::is_same<decltype(&::symbol),                                          \
                             decltype(d::Driver::field)>::value || SameShape<decltype(&::symbol), decltype(d::Driver::field)>::value, #symbol)

// Handles are declared as pointers to our own incomplete structs, so compare the shape:
// same return type, same number of parameters, each the same size.
template <typename A, typename B>
struct SameShape : std::false_type {};
template <typename... X, typename... Y>
struct SameShape<CUresult (*)(X...), d::CUresult (*)(Y...)>
    : std::integral_constant<bool, sizeof...(X) == sizeof...(Y) &&
                                       ((sizeof(X) == sizeof(Y)) && ... && true) &&
                                       sizeof(CUresult) == sizeof(d::CUresult)> {};

SAME_TYPE(cuInit, cuInit);
SAME_TYPE(cuDeviceGet, cuDeviceGet);
SAME_TYPE(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
SAME_TYPE(cuCtxSetCurrent, cuCtxSetCurrent);
SAME_TYPE(cuCtxGetCurrent, cuCtxGetCurrent);
SAME_TYPE(cuStreamCreate, cuStreamCreate);
SAME_TYPE(cuStreamWaitEvent, cuStreamWaitEvent);
SAME_TYPE(cuEventCreate, cuEventCreate);
SAME_TYPE(cuEventRecord, cuEventRecord);
SAME_TYPE(cuEventQuery, cuEventQuery);
SAME_TYPE(cuEventDestroy, cuEventDestroy_v2);
SAME_TYPE(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2);
SAME_TYPE(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2);
SAME_TYPE(cuMemHostAlloc, cuMemHostAlloc);
SAME_TYPE(cuMemFreeHost, cuMemFreeHost);
SAME_TYPE(cuGetErrorString, cuGetErrorString);
SAME_TYPE(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer_v2);
SAME_TYPE(cuStreamWriteValue32, cuStreamWriteValue32_v2);
SAME_TYPE(cuStreamWaitValue32, cuStreamWaitValue32_v2);

static_assert(d::CUDA_SUCCESS == CUDA_SUCCESS, "CUDA_SUCCESS");
static_assert(d::CUDA_ERROR_NOT_READY == CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY");
static_assert(d::CU_STREAM_NON_BLOCKING == CU_STREAM_NON_BLOCKING, "CU_STREAM_NON_BLOCKING");
static_assert(d::CU_EVENT_DISABLE_TIMING == CU_EVENT_DISABLE_TIMING, "CU_EVENT_DISABLE_TIMING");
static_assert(d::kMemHostAllocPortable == CU_MEMHOSTALLOC_PORTABLE, "CU_MEMHOSTALLOC_PORTABLE");
static_assert(d::kMemHostAllocDeviceMap == CU_MEMHOSTALLOC_DEVICEMAP, "CU_MEMHOSTALLOC_DEVICEMAP");
static_assert(d::CU_STREAM_WAIT_VALUE_GEQ == CU_STREAM_WAIT_VALUE_GEQ, "CU_STREAM_WAIT_VALUE_GEQ");
static_assert(d::CU_STREAM_WRITE_VALUE_DEFAULT == CU_STREAM_WRITE_VALUE_DEFAULT, "CU_STREAM_WRITE_VALUE_DEFAULT");
static_assert(std::is_same<d::CUdeviceptr, ::CUdeviceptr>::value, "CUdeviceptr");
static_assert(sizeof(d::CUdevice) == sizeof(::CUdevice), "CUdevice");

int main() { return 0; }
