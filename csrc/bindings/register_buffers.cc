// pycollect._C.array_span: a numpy array's (address, element count, dtype code) in one
// crossing, for the API's per-call validation (pycollect/_buffers.py). Asking numpy from
// Python costs microseconds (`a.ctypes.data`, `a.dtype.name`); here they are a few field
// reads of the array. Only the plain case is answered: anything else (another type, a
// dtype the engine lacks, not C-contiguous, read-only where written, misaligned, bytes
// not in native order) returns None, and Python asks again the slow way, which raises
// the error that names what is wrong. So refusals and their messages live in one place.
#include <pybind11/numpy.h>

#include <vector>

#include "bindings/host_span.h"
#include "bindings/register.h"
#include "common/types.h"
#include "reduce/compress.h"

namespace py = pybind11;

namespace pycollect {

void registerBuffers(py::module_& m) {
  m.def(
      "array_span",
      [](const py::handle& obj, bool writable) -> py::object {
        HostSpan span;
        if (!plainArraySpan(obj.ptr(), writable, span)) return py::none();
        return py::make_tuple(span.address, span.count, span.dtype);
      },
      py::arg("array"), py::arg("writable"));
  // Once the process has imported torch (pycollect/_buffers.py): what the fast calls need
  // to read a CPU tensor's buffer in C++ (host_span.h).
  m.def(
      "know_torch",
      [](const py::handle& tensorType, const py::handle& strided, const py::dict& dtypeCodes) {
        knowTorch(tensorType.ptr(), strided.ptr(), dtypeCodes.ptr());
      },
      py::arg("tensor_type"), py::arg("strided"), py::arg("dtype_codes"));
  // pycollect._torch's reader of tensors (its `tensor_reader` capsule), where the process
  // loaded that module: the fast calls read a tensor's fields instead of its attributes.
  m.def(
      "know_tensor_reader",
      [](const py::capsule& reader) {
        void* p = PyCapsule_GetPointer(reader.ptr(), kTensorReaderCapsule);
        if (p == nullptr) throw py::error_already_set();
        knowTensorReader(reinterpret_cast<TensorReader>(p));
      },
      py::arg("reader"));
  // What one encode and decode in an all-reduce's wire format does to `count` float32
  // values, in place (reduce/compress.h): the DDP hook's error feedback keeps the
  // difference, the tests check the bound. The caller keeps the buffer alive.
  m.def(
      "wire_round_trip",
      [](uintptr_t address, size_t count, int compress) {
        const Compress c = checkedCompress(compress);
        if (c == Compress::kNone) return;
        float* data = reinterpret_cast<float*>(address);
        py::gil_scoped_release release;  // our own buffer only, no Python object touched
        std::vector<char> wire(wireBytes(c, count));
        encode(c, data, count, wire.data());
        decode(c, wire.data(), count, data);
      },
      py::arg("address"), py::arg("count"), py::arg("compress"));
  m.def(
      "wire_bytes", [](size_t count, int compress) { return wireBytes(checkedCompress(compress), count); },
      py::arg("count"), py::arg("compress"));
}

}  // namespace pycollect
