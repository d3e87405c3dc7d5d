// pycollect._C.array_span: a numpy array's (address, element count, dtype code) in one
// crossing, for the API's per-call validation (pycollect/_buffers.py). Asking numpy from
// Python costs microseconds (`a.ctypes.data`, `a.dtype.name`); here they are a few field
// reads of the array. Only the plain case is answered: anything else (another type, a
// dtype the engine lacks, not C-contiguous, read-only where written, misaligned, bytes
// not in native order) returns None, and Python asks again the slow way, which raises
// the error that names what is wrong. So refusals and their messages live in one place.
#include <pybind11/numpy.h>

#include <vector>

#include "bindings/register.h"
#include "common/types.h"
#include "reduce/compress.h"

namespace py = pybind11;

namespace pycollect {

namespace {

// The engine's dtype for a numpy kind and element size; -1 where it has none.
int dtypeCode(char kind, py::ssize_t itemsize) {
  DType t;
  switch (kind) {
    case 'f':
      if (itemsize == 4) t = DType::kFloat32;
      else if (itemsize == 8) t = DType::kFloat64;
      else if (itemsize == 2) t = DType::kFloat16;
      else return -1;
      break;
    case 'i':
      if (itemsize == 1) t = DType::kInt8;
      else if (itemsize == 2) t = DType::kInt16;
      else if (itemsize == 4) t = DType::kInt32;
      else if (itemsize == 8) t = DType::kInt64;
      else return -1;
      break;
    case 'u':
      if (itemsize != 1) return -1;
      t = DType::kUInt8;
      break;
    case 'b':
      t = DType::kBool;
      break;
    default: return -1;
  }
  return static_cast<int>(t);
}

}  // namespace

void registerBuffers(py::module_& m) {
  m.def(
      "array_span",
      [](const py::handle& obj, bool writable) -> py::object {
        if (!py::isinstance<py::array>(obj)) return py::none();
        auto a = py::reinterpret_borrow<py::array>(obj);
        const int flags = a.flags();
        const int need = py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | py::detail::npy_api::NPY_ARRAY_ALIGNED_ |
                         (writable ? py::detail::npy_api::NPY_ARRAY_WRITEABLE_ : 0);
        if ((flags & need) != need) return py::none();
        const py::dtype dt = a.dtype();
        const char order = dt.byteorder();  // '=' native, '|' not applicable (1 byte)
        if (order != '=' && order != '|') return py::none();
        const int code = dtypeCode(dt.kind(), dt.itemsize());
        if (code < 0) return py::none();
        return py::make_tuple(reinterpret_cast<uintptr_t>(a.data()), a.size(), code);
      },
      py::arg("array"), py::arg("writable"));
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
