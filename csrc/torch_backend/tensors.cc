#include "torch_backend/tensors.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/python_variable.h>

#include "common/memory.h"

namespace pycollect::torchb {

namespace {

std::optional<DType> engineDType(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::kFloat32;
    case at::kDouble: return DType::kFloat64;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kChar: return DType::kInt8;
    case at::kByte: return DType::kUInt8;
    case at::kInt: return DType::kInt32;
    case at::kLong: return DType::kInt64;
    case at::kShort: return DType::kInt16;
    case at::kBool: return DType::kBool;
    default: return std::nullopt;
  }
}

constexpr const char* kSupported = "float32, float64, float16, bfloat16, int8, uint8, int32, int64, int16, bool";

}  // namespace

bool readHostSpan(void* obj, bool writable, HostSpan& out) {
  auto* x = static_cast<PyObject*>(obj);
  if (!THPVariable_CheckExact(x)) return false;  // a subclass may override what is read
  const at::Tensor& t = THPVariable_Unpack(x);
  if (!t.defined() || !t.device().is_cpu() || t.layout() != c10::kStrided || !t.is_contiguous()) return false;
  const auto dtype = engineDType(t.scalar_type());
  if (!dtype) return false;
  const size_t elementBytes = t.element_size();
  void* data = t.data_ptr();
  if (reinterpret_cast<uintptr_t>(data) % elementBytes != 0) return false;
  const size_t count = t.numel();
  // Memory torch allocated itself is writable; only foreign memory (from_numpy, frombuffer:
  // storage that cannot be resized) may be a read-only mapping.
  if (writable && !t.storage().resizable() && !isWritable(data, count * elementBytes)) return false;
  out = HostSpan{reinterpret_cast<uintptr_t>(data), count, static_cast<int>(*dtype), t.dim() > 0 ? t.size(0) : -1};
  return true;
}

DType checkKind(const at::Tensor& t, const char* method, const char* what) {
  if (!t.defined()) C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, "(", what, "): undefined tensor"));
  const auto type = t.device().type();
  if (type != c10::DeviceType::CPU && type != c10::DeviceType::CUDA) {
    C10_THROW_ERROR(NotImplementedError, c10::str("pycollect backend: ", method, "(", what, "): tensor is on ",
                                                  t.device(), "; pycollect moves CPU and CUDA tensors only"));
  }
  if (t.layout() != c10::kStrided || t.is_quantized()) {
    C10_THROW_ERROR(TypeError, c10::str("pycollect backend: ", method, "(", what,
                                        "): sparse and quantized tensors are not supported here"));
  }
  auto dtype = engineDType(t.scalar_type());
  if (!dtype) {
    C10_THROW_ERROR(TypeError, c10::str("pycollect backend: ", method, "(", what, "): dtype ", t.scalar_type(),
                                        " is not supported; use one of ", kSupported));
  }
  return *dtype;
}

Buffer check(const at::Tensor& t, const char* method, const char* what) {
  const DType dtype = checkKind(t, method, what);
  if (!t.is_contiguous()) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, "(", what, "): tensor is not contiguous (shape ",
                                         t.sizes(), ", stride ", t.strides(), "); call .contiguous()"));
  }
  auto* data = static_cast<char*>(t.data_ptr());
  if (reinterpret_cast<uintptr_t>(data) % t.element_size() != 0) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, "(", what, "): data is not aligned to its ",
                                         t.element_size(), "-byte elements; pass an aligned copy (.clone())"));
  }
  return Buffer{data, static_cast<size_t>(t.numel()), dtype, t.is_cuda() ? t.device().index() : -1};
}

void checkOneList(size_t n, const char* method, const char* what) {
  if (n != 1) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, ": expected one entry per rank in ", what, ", got ",
                                         n, " (multi-device lists are not supported)"));
  }
}

at::Tensor& single(std::vector<at::Tensor>& tensors, const char* method, const char* what) {
  checkOneList(tensors.size(), method, what);
  return tensors[0];
}

void checkSameDType(c10::ArrayRef<at::Tensor> tensors, const at::Tensor& like, const char* method) {
  for (const auto& t : tensors) {
    if (t.scalar_type() != like.scalar_type()) {
      C10_THROW_ERROR(TypeError, c10::str("pycollect backend: ", method, ": dtypes differ (", t.scalar_type(), " vs ",
                                          like.scalar_type(), ")"));
    }
  }
}

void checkNumel(const at::Tensor& t, int64_t n, const char* method, const char* what) {
  if (t.numel() != n) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, "(", what, "): has ", t.numel(),
                                         " elements, expected ", n));
  }
}

Reduction reduction(const c10d::ReduceOp& op, const char* method) {
  Reduction r;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r.op = ReduceOp::kSum; return r;
    case c10d::ReduceOp::AVG: r.op = ReduceOp::kAvg; return r;
    case c10d::ReduceOp::PRODUCT: r.op = ReduceOp::kProd; return r;
    case c10d::ReduceOp::MIN: r.op = ReduceOp::kMin; return r;
    case c10d::ReduceOp::MAX: r.op = ReduceOp::kMax; return r;
    case c10d::ReduceOp::BAND: r.op = ReduceOp::kBand; return r;
    case c10d::ReduceOp::BOR: r.op = ReduceOp::kBor; return r;
    case c10d::ReduceOp::BXOR: r.op = ReduceOp::kBxor; return r;
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      if (s == nullptr) {
        C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, ": PREMUL_SUM needs its factor; pass "
                                             "dist.ReduceOp.PREMUL_SUM(factor)"));
      }
      if (s->tensor_factor.defined()) {
        r.factorTensor = s->tensor_factor;
      } else {
        r.factor = s->double_factor;
      }
      return r;
    }
    default: break;
  }
  C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, " does not support ReduceOp ",
                                       static_cast<int>(op.op_), "; supported: SUM, AVG, PRODUCT, MIN, MAX, ",
                                       "BAND, BOR, BXOR, PREMUL_SUM"));
}

at::Tensor premultiply(const Reduction& r, const at::Tensor& t, bool inPlace, const char* method) {
  if (!at::isFloatingType(t.scalar_type())) {
    C10_THROW_ERROR(TypeError, c10::str("pycollect backend: ", method, ": PREMUL_SUM needs a floating tensor, got ",
                                        t.scalar_type()));
  }
  if (inPlace) {
    return r.factorTensor ? t.mul_(*r.factorTensor) : t.mul_(*r.factor);
  }
  return (r.factorTensor ? at::mul(t, *r.factorTensor) : at::mul(t, *r.factor)).to(t.scalar_type()).contiguous();
}

uintptr_t currentStream(int device) {
  const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  c10::Stream s = impl->getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
  return reinterpret_cast<uintptr_t>(s.native_handle());
}

}  // namespace pycollect::torchb
