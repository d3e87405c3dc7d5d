#pragma once
// A plain host buffer as the API's fast calls read it from a Python object
// (bindings/host_span.h), and the reader of torch tensors that pycollect._torch hands to
// pycollect._C for them (torch_backend/tensors.h): the contract between the two modules.
// No Python here: the object travels untyped (a PyObject*).
#include <cstddef>
#include <cstdint>

namespace pycollect {

struct HostSpan {
  uintptr_t address = 0;
  size_t count = 0;
  int dtype = -1;  // the engine's DType code
  int64_t rows = -1;  // its first dimension (all_to_all_single's chunks); -1: it has none (0-d)
};

// Reads a Python object (a PyObject*): true and its span for a plain CPU tensor (writable
// where `writable`), false for anything else. Passed in a capsule of this name.
using TensorReader = bool (*)(void* pyObject, bool writable, HostSpan& out);
inline constexpr const char* kTensorReaderCapsule = "pycollect.tensor_reader";

}  // namespace pycollect
