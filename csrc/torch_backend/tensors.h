// What the torch backend asks of a tensor before anything is sent: its engine dtype,
// that it is dense and contiguous, where it lives (host memory, or a CUDA device and the
// caller's current stream there), and torch's reduce ops in the engine's terms. Every
// refusal is torch's own exception type (TypeError, ValueError, NotImplementedError),
// naming the call and the argument, and leaves the group untouched.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <string>
#include <vector>

#include "collectives/context.h"
#include "common/host_span.h"
#include "common/types.h"

namespace pycollect::torchb {

// A checked tensor: its memory as the engine takes it.
struct Buffer {
  char* data = nullptr;
  size_t count = 0;  // elements
  DType dtype = DType::kFloat32;
  int device = -1;  // CUDA ordinal; -1: host memory
  Span span() const { return Span{data, count}; }
};

// pycollect._C's TensorReader (common/host_span.h): a plain CPU torch.Tensor's buffer read
// from its fields, for the API's fast calls; false for anything else (the API then asks the
// slow way, which names what is wrong). `obj`: a PyObject*.
bool readHostSpan(void* obj, bool writable, HostSpan& out);
// Checks `t` (argument `what` of call `method`) and returns its Buffer.
Buffer check(const at::Tensor& t, const char* method, const char* what);
// What check() asks of every tensor but contiguity and alignment: defined, on the host or a
// CUDA device, dense, of an engine dtype. Enough for a tensor the backend only copies into
// (the list all-gather's outputs, any strides); returns its engine dtype.
DType checkKind(const at::Tensor& t, const char* method, const char* what);
// The one tensor of torch's per-device list (pycollect drives one device per rank).
at::Tensor& single(std::vector<at::Tensor>& tensors, const char* method, const char* what = "tensors");
// A list argument of torch's per-device form has one entry (`n`), else ValueError.
void checkOneList(size_t n, const char* method, const char* what);
// Every tensor of `tensors` has `dtype` (the call's), else TypeError.
void checkSameDType(c10::ArrayRef<at::Tensor> tensors, const at::Tensor& like, const char* method);
// Element count `n` expected of `t`, else ValueError.
void checkNumel(const at::Tensor& t, int64_t n, const char* method, const char* what);

// torch's reduce op in the engine's terms: SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR;
// PREMUL_SUM is SUM with `factor` set (its double or 0-d tensor). Another raises ValueError.
struct Reduction {
  ReduceOp op = ReduceOp::kSum;
  std::optional<at::Tensor> factorTensor;
  std::optional<double> factor;
  bool premul() const { return factor.has_value() || factorTensor.has_value(); }
};
Reduction reduction(const c10d::ReduceOp& op, const char* method);
// PREMUL_SUM: `t` scaled by the factor (floating tensors only): in place, or a new tensor.
at::Tensor premultiply(const Reduction& r, const at::Tensor& t, bool inPlace, const char* method);

// The caller's current CUDA stream on `device`, as the engine takes it (cudaStream_t).
uintptr_t currentStream(int device);

}  // namespace pycollect::torchb
