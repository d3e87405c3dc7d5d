// host_span.h: a numpy array's or a CPU torch tensor's plain buffer, read in C++.
#include "bindings/host_span.h"

#include <pybind11/numpy.h>

#include "common/memory.h"
#include "common/types.h"

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

// What knowTorch was given: held for the life of the process (never released, so nothing
// is freed while the interpreter finalises).
struct Torch {
  PyObject* tensorType = nullptr;
  PyObject* strided = nullptr;
  PyObject* dtypeCodes = nullptr;  // dict
};
Torch knownTorch;
TensorReader tensorReader = nullptr;  // pycollect._torch's, once known

// Interned attribute and method names, made once.
PyObject* name(const char* s) {
  PyObject* n = PyUnicode_InternFromString(s);
  if (n == nullptr) throw py::error_already_set();
  return n;
}

// obj.attr (a new reference), or nullptr with no Python error left set.
PyObject* attr(PyObject* obj, PyObject* n) {
  PyObject* v = PyObject_GetAttr(obj, n);
  if (v == nullptr) PyErr_Clear();
  return v;
}

// obj.method() (a new reference), or nullptr with no Python error left set.
PyObject* call(PyObject* obj, PyObject* n) {
  PyObject* v = PyObject_CallMethodNoArgs(obj, n);
  if (v == nullptr) PyErr_Clear();
  return v;
}

// A Python int's value into `out`; false (no error left set) for anything else.
bool integer(PyObject* v, long long& out) {
  if (v == nullptr) return false;
  out = PyLong_AsLongLong(v);
  Py_DECREF(v);
  if (out == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

// Whether obj.n is the object `expected` (a borrowed singleton: True, the strided layout).
bool attrIs(PyObject* obj, PyObject* n, PyObject* expected) {
  PyObject* v = attr(obj, n);
  const bool is = v == expected;
  Py_XDECREF(v);
  return is;
}

}  // namespace

bool plainArraySpan(PyObject* obj, bool writable, HostSpan& out) {
  if (!py::isinstance<py::array>(obj)) return false;
  auto a = py::reinterpret_borrow<py::array>(obj);
  const int flags = a.flags();
  const int need = py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | py::detail::npy_api::NPY_ARRAY_ALIGNED_ |
                   (writable ? py::detail::npy_api::NPY_ARRAY_WRITEABLE_ : 0);
  if ((flags & need) != need) return false;
  const py::dtype dt = a.dtype();
  const char order = dt.byteorder();  // '=' native, '|' not applicable (1 byte)
  if (order != '=' && order != '|') return false;
  const int code = dtypeCode(dt.kind(), dt.itemsize());
  if (code < 0) return false;
  out = HostSpan{reinterpret_cast<uintptr_t>(a.data()), static_cast<size_t>(a.size()), code,
                 a.ndim() > 0 ? static_cast<int64_t>(a.shape(0)) : -1};
  return true;
}

bool plainTensorSpan(PyObject* x, bool writable, HostSpan& out) {
  if (tensorReader != nullptr) return tensorReader(x, writable, out);  // pycollect._torch's
  static PyObject *kDtype = name("dtype"), *kIsCpu = name("is_cpu"), *kLayout = name("layout"),
                  *kIsContiguous = name("is_contiguous"), *kDataPtr = name("data_ptr"), *kNumel = name("numel"),
                  *kStorage = name("untyped_storage"), *kResizable = name("resizable"), *kShape = name("shape");
  const auto* tensorType = reinterpret_cast<PyTypeObject*>(knownTorch.tensorType);
  if (tensorType == nullptr || Py_TYPE(x) != tensorType) return false;
  PyObject* dtype = attr(x, kDtype);
  if (dtype == nullptr) return false;
  PyObject* code = PyDict_GetItemWithError(knownTorch.dtypeCodes, dtype);  // borrowed
  Py_DECREF(dtype);
  if (code == nullptr) {  // not an engine dtype (or the lookup failed)
    PyErr_Clear();
    return false;
  }
  const long long c = PyLong_AsLongLong(code);
  if (c < 0) {
    PyErr_Clear();
    return false;
  }
  if (!attrIs(x, kIsCpu, Py_True) || !attrIs(x, kLayout, knownTorch.strided)) return false;
  PyObject* contiguous = call(x, kIsContiguous);
  const bool isContiguous = contiguous == Py_True;
  Py_XDECREF(contiguous);
  if (!isContiguous) return false;
  long long address = 0, count = 0;
  if (!integer(call(x, kDataPtr), address) || !integer(call(x, kNumel), count)) return false;
  const size_t elementBytes = dtypeSize(static_cast<DType>(c));
  if (address % static_cast<long long>(elementBytes) != 0) return false;
  if (writable) {
    // Memory torch allocated itself is writable; only foreign memory (from_numpy,
    // frombuffer: storage that cannot be resized) may be a read-only mapping.
    PyObject* storage = call(x, kStorage);
    if (storage == nullptr) return false;
    PyObject* resizable = call(storage, kResizable);
    Py_DECREF(storage);
    const bool own = resizable == Py_True;
    Py_XDECREF(resizable);
    if (!own && !isWritable(reinterpret_cast<void*>(address), static_cast<size_t>(count) * elementBytes)) {
      return false;
    }
  }
  long long rows = -1;
  if (PyObject* shape = attr(x, kShape)) {  // a torch.Size: a tuple
    if (PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) > 0) {
      rows = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, 0));
      if (rows == -1 && PyErr_Occurred()) PyErr_Clear();
    }
    Py_DECREF(shape);
  }
  out = HostSpan{static_cast<uintptr_t>(address), static_cast<size_t>(count), static_cast<int>(c), rows};
  return true;
}

void knowTorch(PyObject* tensorType, PyObject* strided, PyObject* dtypeCodes) {
  if (knownTorch.tensorType != nullptr) return;  // once: the objects live as long as the process
  Py_INCREF(strided);
  Py_INCREF(dtypeCodes);
  Py_INCREF(tensorType);
  knownTorch.strided = strided;
  knownTorch.dtypeCodes = dtypeCodes;
  knownTorch.tensorType = tensorType;
}

void knowTensorReader(TensorReader reader) { tensorReader = reader; }

}  // namespace pycollect
