// issue_lock.h: the type, with threading.Lock's acquire(), release(), locked() and `with`.
#include "bindings/issue_lock.h"

#include <pybind11/pybind11.h>

#include <mutex>
#include <new>
#include <thread>

#include "bindings/register.h"

namespace py = pybind11;

namespace pycollect {

namespace {

struct IssueLockObject {
  PyObject_HEAD
  std::mutex* mu;
  std::thread::id owner;  // (under the GIL) the holder, none while free: only it may release
};

PyTypeObject* issueLockType = nullptr;

IssueLockObject* lockOf(PyObject* self) { return reinterpret_cast<IssueLockObject*>(self); }

// Takes the lock for this thread, which holds the GIL: at once when free, else waiting
// with the GIL released (the holder may need it to finish).
void lock(IssueLockObject* l) {
  if (!l->mu->try_lock()) {
    py::gil_scoped_release nogil;
    l->mu->lock();
  }
  l->owner = std::this_thread::get_id();
}

void unlock(IssueLockObject* l) {
  l->owner = std::thread::id();
  l->mu->unlock();
}

PyObject* acquire(PyObject* self, PyObject*) {
  lock(lockOf(self));
  Py_RETURN_TRUE;
}

PyObject* release(PyObject* self, PyObject*) {
  if (lockOf(self)->owner != std::this_thread::get_id()) {
    PyErr_SetString(PyExc_RuntimeError, "IssueLock.release: this thread does not hold it");
    return nullptr;
  }
  unlock(lockOf(self));
  Py_RETURN_NONE;
}

PyObject* exitWith(PyObject* self, PyObject* const*, Py_ssize_t) { return release(self, nullptr); }

PyObject* locked(PyObject* self, PyObject*) { return PyBool_FromLong(lockOf(self)->owner != std::thread::id()); }

PyObject* make(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  if (PyTuple_GET_SIZE(args) != 0 || (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0)) {
    PyErr_SetString(PyExc_TypeError, "IssueLock() takes no arguments");
    return nullptr;
  }
  PyObject* o = type->tp_alloc(type, 0);
  if (o == nullptr) return nullptr;
  lockOf(o)->mu = new std::mutex;
  new (&lockOf(o)->owner) std::thread::id();  // free
  return o;
}

void dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  delete lockOf(self)->mu;
  type->tp_free(self);
  Py_DECREF(type);
}

PyMethodDef methods[] = {
    {"acquire", acquire, METH_NOARGS, "acquire(): waits until free (the GIL released meanwhile); True"},
    {"release", release, METH_NOARGS, "release()"},
    {"locked", locked, METH_NOARGS, "locked(): whether a thread holds it"},
    {"__enter__", acquire, METH_NOARGS, nullptr},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(exitWith)), METH_FASTCALL, nullptr},
    {nullptr, nullptr, 0, nullptr}};

PyType_Slot slots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(dealloc)},
                       {Py_tp_new, reinterpret_cast<void*>(make)},
                       {Py_tp_methods, methods},
                       {Py_tp_doc, const_cast<char*>("A group's lock on issuing calls (bindings/issue_lock.h).")},
                       {0, nullptr}};
PyType_Spec spec = {"pycollect._C.IssueLock", sizeof(IssueLockObject), 0, Py_TPFLAGS_DEFAULT, slots};

}  // namespace

bool isIssueLock(PyObject* obj) { return issueLockType != nullptr && Py_TYPE(obj) == issueLockType; }

IssueLockHeld::IssueLockHeld(PyObject* l) : lock_(l) { lock(lockOf(lock_)); }

IssueLockHeld::~IssueLockHeld() { unlock(lockOf(lock_)); }

void registerIssueLock(py::module_& m) {
  PyObject* type = PyType_FromSpec(&spec);
  if (type == nullptr) throw py::error_already_set();
  m.add_object("IssueLock", py::reinterpret_borrow<py::object>(type));
  issueLockType = reinterpret_cast<PyTypeObject*>(type);  // this reference: never released
}

}  // namespace pycollect
