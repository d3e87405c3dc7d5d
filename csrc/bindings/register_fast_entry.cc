// pycollect._C.fast_entry: a public API function whose blocking calls on host buffers skip
// the Python frame. pycollect/api.py wraps each function that has a fast call in one: a C
// callable that binds the caller's arguments to the function's own parameters, and where
// the call may take the fast path (every parameter named in `off` left at None or False:
// async_op, compress) hands FastFront's method the parameters it takes. What it
// answers:
//   False   declined (nothing issued): the Python function runs, on the caller's original
//           arguments, and raises what is wrong;
//   None    the call ran to its end: None, or the parameter named `returns` (recv's src);
//   an int  a receive from any source ended: the sender's global rank;
//   a Work  issued but not ended on this thread: `finish(work, *fast arguments)` waits
//           for it as the Python function would.
// An entry given `async_param` (async_op) takes its fast path also where that parameter is
// True and the others of `off` are off: FastFront's method runs under a FastAsyncScope
// (fast_calls.h), so the call is queued and comes back as the engine's Work, and
// `async_finish(work, *fast arguments)` makes the API's Work of it. An entry given
// `async_finish` without `async_param` (isend, irecv) queues every call so.
// Anything it cannot bind (a missing or unknown argument, too many) goes to the Python
// function as well, which raises the TypeError Python would. The Python frame, the
// defaults and the checks cost some 0.05 us of a 0.7 us all-reduce (docs/measurements.md,
// "The API's functions as C entries"); binding here costs a few nanoseconds.
//
// The entry is the function to its readers: functools.update_wrapper gives it the
// function's name, docstring and __wrapped__ (so inspect.signature shows its parameters),
// and it pickles by name, as a function does.
#include <pybind11/pybind11.h>
#include <structmember.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "bindings/fast_calls.h"
#include "bindings/register.h"

namespace py = pybind11;

// Python 3.9 (pyproject's oldest) has no immutable types: there the entry's type may be changed.
#ifndef Py_TPFLAGS_IMMUTABLETYPE
#define Py_TPFLAGS_IMMUTABLETYPE 0
#endif

namespace pycollect {

namespace {

constexpr int kEntryMaxParams = 8;

struct FastEntryObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* dict;      // __name__, __doc__, __wrapped__, ... (functools.update_wrapper)
  PyObject* function;  // the Python function: the general path, and the parameters' names
  PyObject* front;     // FastFront's bound method
  PyObject* finish;    // finish(work, *fast arguments)
  PyObject* nameTuple;     // the function's co_varnames and __defaults__ as the entry was made,
  PyObject* defaultTuple;  // held: names and defaults below are borrowed from them
  PyObject* names[kEntryMaxParams];     // the function's parameters
  PyObject* defaults[kEntryMaxParams];  // each one's default; nullptr: none (required)
  int params;
  std::array<int, kEntryMaxParams> fast;  // the parameters FastFront takes, in its order
  int fastCount;
  std::array<int, kEntryMaxParams> off;  // parameters that must be None or False for the fast path
  int offCount;
  int returns;  // the parameter returned when the call ended (-1: None)
  int asyncParam;        // the parameter that asks for an async call (-1: none, or every call); one of `off`
  PyObject* asyncFinish;  // async_finish(work, *fast arguments): the API's Work (nullptr: none)
};

FastEntryObject* asEntry(PyObject* self) { return reinterpret_cast<FastEntryObject*>(self); }

// The parameter called `name`, or -1.
int entryParameter(const FastEntryObject* e, PyObject* name) {
  for (int i = 0; i < e->params; ++i) {
    if (e->names[i] == name) return i;  // interned alike: the common case
  }
  for (int i = 0; i < e->params; ++i) {
    const int same = PyUnicode_Compare(e->names[i], name);
    if (same == 0) return i;
    if (same == -1 && PyErr_Occurred()) PyErr_Clear();
  }
  return -1;
}

// The caller's arguments bound to the parameters, defaults filled in; false where they do
// not bind (the Python function says why).
bool entryBind(const FastEntryObject* e, PyObject* const* args, Py_ssize_t positional, PyObject* kwnames,
               PyObject** bound) {
  if (positional > e->params) return false;
  for (int i = 0; i < e->params; ++i) bound[i] = i < positional ? args[i] : nullptr;
  const Py_ssize_t keywords = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < keywords; ++k) {
    const int i = entryParameter(e, PyTuple_GET_ITEM(kwnames, k));
    if (i < 0 || bound[i] != nullptr) return false;
    bound[i] = args[positional + k];
  }
  for (int i = 0; i < e->params; ++i) {
    if (bound[i] == nullptr) bound[i] = e->defaults[i];
    if (bound[i] == nullptr) return false;
  }
  return true;
}

PyObject* entryCall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  FastEntryObject* e = asEntry(self);
  PyObject* bound[kEntryMaxParams];
  bool fast = entryBind(e, args, PyVectorcall_NARGS(nargsf), kwnames, bound);
  bool async = e->asyncFinish != nullptr && e->asyncParam < 0;
  for (int j = 0; fast && j < e->offCount; ++j) {
    PyObject* v = bound[e->off[j]];
    if (v == Py_True && e->off[j] == e->asyncParam) {
      async = true;
    } else {
      fast = v == Py_None || v == Py_False;
    }
  }
  if (fast) {
    PyObject* call[kEntryMaxParams + 1];  // call[0]: room for finish's Work
    for (int j = 0; j < e->fastCount; ++j) call[j + 1] = bound[e->fast[j]];
    std::optional<FastAsyncScope> queued;
    if (async) queued.emplace();
    PyObject* r = PyObject_Vectorcall(e->front, call + 1, e->fastCount, nullptr);
    queued.reset();
    if (r == nullptr) return nullptr;  // the call's own error (it was issued)
    if (async && r != Py_False) {  // the queued call's engine Work
      if (r == Py_None) {  // FastCalls hands back every call it queued (fast_calls.h)
        Py_DECREF(r);
        PyErr_SetString(PyExc_RuntimeError, "pycollect: a queued fast call came back without its Work");
        return nullptr;
      }
      call[0] = r;
      PyObject* made = PyObject_Vectorcall(e->asyncFinish, call, e->fastCount + 1, nullptr);
      Py_DECREF(r);
      return made;
    }
    if (r == Py_None) {
      Py_DECREF(r);
      PyObject* result = e->returns < 0 ? Py_None : bound[e->returns];
      Py_INCREF(result);
      return result;
    }
    if (r != Py_False) {
      if (PyLong_CheckExact(r)) return r;  // the sender of a receive from any source
      call[0] = r;
      PyObject* done = PyObject_Vectorcall(e->finish, call, e->fastCount + 1, nullptr);
      Py_DECREF(r);
      return done;
    }
    Py_DECREF(r);
  }
  return PyObject_Vectorcall(e->function, args, nargsf, kwnames);
}

int entryTraverse(PyObject* self, visitproc visit, void* arg) {
  FastEntryObject* e = asEntry(self);
  Py_VISIT(e->dict);
  Py_VISIT(e->function);
  Py_VISIT(e->front);
  Py_VISIT(e->finish);
  Py_VISIT(e->asyncFinish);
  Py_VISIT(e->nameTuple);
  Py_VISIT(e->defaultTuple);
  Py_VISIT(Py_TYPE(self));
  return 0;
}

int entryClear(PyObject* self) {
  FastEntryObject* e = asEntry(self);
  Py_CLEAR(e->dict);
  Py_CLEAR(e->function);
  Py_CLEAR(e->front);
  Py_CLEAR(e->finish);
  Py_CLEAR(e->asyncFinish);
  Py_CLEAR(e->nameTuple);
  Py_CLEAR(e->defaultTuple);
  e->params = 0;  // the names and defaults went with their tuples
  return 0;
}

void entryDealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  entryClear(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyObject* entryNotMade(PyTypeObject*, PyObject*, PyObject*) {
  PyErr_SetString(PyExc_TypeError, "pycollect._C.FastEntry is made by pycollect._C.fast_entry");
  return nullptr;
}

// Pickled by name, as a function is: its module's attribute of that name (pickle looks it up).
PyObject* entryReduce(PyObject* self, PyObject*) { return PyObject_GetAttrString(self, "__qualname__"); }

// "<function pycollect.api.all_reduce (its fast call in C)>": what help() and the REPL show.
PyObject* entryRepr(PyObject* self) {
  PyObject* module = PyObject_GetAttrString(self, "__module__");
  PyObject* name = module == nullptr ? nullptr : PyObject_GetAttrString(self, "__qualname__");
  PyObject* r = nullptr;
  if (name != nullptr) {
    r = PyUnicode_FromFormat("<function %S.%S (its fast call in C)>", module, name);
  } else {  // not given its function's names (functools.update_wrapper)
    PyErr_Clear();
    r = PyUnicode_FromFormat("<pycollect._C.FastEntry of %R>", asEntry(self)->function);
  }
  Py_XDECREF(module);
  Py_XDECREF(name);
  return r;
}

PyMethodDef entryMethods[] = {{"__reduce__", entryReduce, METH_NOARGS, nullptr}, {nullptr, nullptr, 0, nullptr}};

PyMemberDef entryMembers[] = {
    {"__dictoffset__", T_PYSSIZET, offsetof(FastEntryObject, dict), READONLY, nullptr},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(FastEntryObject, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

PyGetSetDef entryGetSet[] = {{"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
                             {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyType_Slot entrySlots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(entryDealloc)},
                            {Py_tp_traverse, reinterpret_cast<void*>(entryTraverse)},
                            {Py_tp_clear, reinterpret_cast<void*>(entryClear)},
                            {Py_tp_new, reinterpret_cast<void*>(entryNotMade)},
                            {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
                            {Py_tp_repr, reinterpret_cast<void*>(entryRepr)},
                            {Py_tp_members, entryMembers},
                            {Py_tp_methods, entryMethods},
                            {Py_tp_getset, entryGetSet},
                            {Py_tp_doc, const_cast<char*>("A public API function with its fast call in C "
                                                          "(register_fast_entry.cc).")},
                            {0, nullptr}};
PyType_Spec entrySpec = {"pycollect._C.FastEntry", sizeof(FastEntryObject), 0,
                         Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_IMMUTABLETYPE, entrySlots};
PyTypeObject* entryType = nullptr;

// The indices of `names` among the function's parameters (ValueError for one it lacks).
std::vector<int> entryIndices(const FastEntryObject* e, const std::vector<std::string>& names, const char* what) {
  std::vector<int> out;
  for (const std::string& n : names) {
    py::str s(n);
    const int i = entryParameter(e, s.ptr());
    if (i < 0) throw py::value_error(std::string("fast_entry: ") + what + " names " + n + ", not a parameter");
    out.push_back(i);
  }
  if (out.size() > kEntryMaxParams) throw py::value_error("fast_entry: too many parameters");
  return out;
}

}  // namespace

void registerFastEntry(py::module_& m) {
  PyObject* type = PyType_FromSpec(&entrySpec);
  if (type == nullptr) throw py::error_already_set();
  m.add_object("FastEntry", py::reinterpret_borrow<py::object>(type));
  entryType = reinterpret_cast<PyTypeObject*>(type);  // the module's reference and this one: never freed
  m.def(
      "fast_entry",
      [](py::function function, py::object front, py::object finish, std::vector<std::string> fast,
         std::vector<std::string> off, py::object returns, py::object asyncParam, py::object asyncFinish) {
        py::object code = function.attr("__code__");
        const int params = code.attr("co_argcount").cast<int>();
        if (params > kEntryMaxParams || code.attr("co_kwonlyargcount").cast<int>() != 0) {
          throw py::value_error("fast_entry: a function of at most 8 positional-or-keyword parameters");
        }
        py::tuple names = code.attr("co_varnames");
        py::object given = function.attr("__defaults__");
        py::tuple defaults = given.is_none() ? py::tuple() : py::tuple(given);
        PyObject* o = entryType->tp_alloc(entryType, 0);
        if (o == nullptr) throw py::error_already_set();
        py::object held = py::reinterpret_steal<py::object>(o);
        FastEntryObject* e = asEntry(o);
        e->vectorcall = entryCall;
        e->params = params;
        const int firstDefault = params - static_cast<int>(defaults.size());
        for (int i = 0; i < params; ++i) {
          e->names[i] = PyTuple_GET_ITEM(names.ptr(), i);
          e->defaults[i] = i >= firstDefault ? PyTuple_GET_ITEM(defaults.ptr(), i - firstDefault) : nullptr;
        }
        const std::vector<int> f = entryIndices(e, fast, "fast"), x = entryIndices(e, off, "off");
        e->fastCount = static_cast<int>(f.size());
        std::copy(f.begin(), f.end(), e->fast.begin());
        e->offCount = static_cast<int>(x.size());
        std::copy(x.begin(), x.end(), e->off.begin());
        e->returns = returns.is_none() ? -1 : entryIndices(e, {returns.cast<std::string>()}, "returns")[0];
        e->nameTuple = names.inc_ref().ptr();
        e->defaultTuple = defaults.inc_ref().ptr();
        e->function = function.inc_ref().ptr();
        e->front = front.inc_ref().ptr();
        e->finish = finish.inc_ref().ptr();
        e->asyncParam = -1;
        if (!asyncParam.is_none()) {
          e->asyncParam = entryIndices(e, {asyncParam.cast<std::string>()}, "async_param")[0];
          if (std::find(x.begin(), x.end(), e->asyncParam) == x.end()) {
            throw py::value_error("fast_entry: async_param must be one of the off parameters");
          }
          if (asyncFinish.is_none()) throw py::value_error("fast_entry: async_param needs async_finish");
        }
        if (!asyncFinish.is_none()) e->asyncFinish = asyncFinish.inc_ref().ptr();
        return held;
      },
      py::arg("function"), py::arg("front"), py::arg("finish"), py::arg("fast"), py::arg("off"),
      py::arg("returns") = py::none(), py::arg("async_param") = py::none(), py::arg("async_finish") = py::none(),
      "`function` with its fast call in C: front(*fast parameters) where every `off` parameter is None or "
      "False; finish(work, *fast parameters) for a call issued but not ended; `returns`: the parameter "
      "returned when it ended; where `async_param` (one of `off`) is True and the others off, or always "
      "where `async_finish` is given without it, front's call is queued and async_finish(work, *fast "
      "parameters) returned (register_fast_entry.cc).");
}

}  // namespace pycollect
