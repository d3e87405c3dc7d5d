// pycollect._C.FastCalls and pycollect._C.FastFront: the calls of fast_calls.h as Python
// sees them. Both are plain CPython types whose methods take their arguments as a vector
// (METH_FASTCALL): entering one costs tens of nanoseconds, where pybind11's dispatcher
// spent some 150 matching overloads and converting each argument, on a call whose engine
// part is 400.
//   FastCalls  one per group (ProcessGroup.fast; made by _C.fast_calls), in group ranks.
//   FastFront  one per process (pycollect/api.py's _fast; made by _C.fast_front): the API's
//              functions (their C entries, register_fast_entry.cc) hand it their own
//              arguments. It finds the group (None: the default one, read from
//              pycollect.world) and its FastCalls, maps global ranks to group ranks, and
//              declines where the general path must run: no such group or one without
//              fast calls (destroyed, not a member, staging through a host device), a rank
//              outside it, or a torch profiler recording (the general path names the call
//              in the trace).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>
#include <memory>
#include <vector>

#include "bindings/fast_calls.h"
#include "bindings/register.h"
#include "comm/communicator.h"

namespace py = pybind11;

namespace pycollect {

namespace {

struct FastCallsObject {
  PyObject_HEAD
  FastCalls* impl;
};

struct FastFrontObject {
  PyObject_HEAD
  PyObject* world;     // the pycollect.world module
  PyObject* modules;   // sys.modules
  PyObject* profiler;  // torch.autograd.profiler once imported (looked for in `modules` until then)
  // Their namespaces (borrowed: the modules are held), read as dicts: a module's
  // attribute lookup costs twice a dict's, on every call.
  PyObject* worldDict;
  PyObject* profilerDict;
  // A call's `algo` argument: the Algo enum, and per call (all_reduce, all_gather,
  // reduce_scatter, broadcast) a dict of what it takes (its Algo members and their names,
  // lower and upper case) to the code; held in `algoCodes` (borrowed from it).
  PyObject* algoType;
  PyObject* algoCodes;
  PyObject *allReduceAlgos, *allGatherAlgos, *reduceScatterAlgos, *broadcastAlgos;
};

PyTypeObject* fastCallsType = nullptr;  // made once, in registerFastCalls
PyTypeObject* fastFrontType = nullptr;

FastCalls* calls(PyObject* self) { return reinterpret_cast<FastCallsObject*>(self)->impl; }

PyObject* interned(const char* s) {
  PyObject* n = PyUnicode_InternFromString(s);
  if (n == nullptr) throw py::error_already_set();
  return n;
}

// A method's result, or nullptr with the Python error of what it threw.
template <class F>
PyObject* guarded(F&& f) noexcept {
  try {
    return f().release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (...) {
    setPythonError(std::current_exception());
  }
  return nullptr;
}

bool arity(const char* method, Py_ssize_t given, Py_ssize_t wanted) {
  if (given == wanted) return true;
  PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", method, wanted, given);
  return false;
}

// A call's `algo` argument, looked up in the front's dict `codes` (FastFrontObject): None,
// the group's own (FastCalls::kGroupAlgo); a str or an Algo that the dict holds, its code.
// False for anything else (an int, another case of a name, an algorithm the call does not
// have): the general path takes the call and names what is wrong.
bool callAlgo(PyObject* self, PyObject* FastFrontObject::*codes, PyObject* v, int& out) {
  if (v == Py_None) {
    out = FastCalls::kGroupAlgo;
    return true;
  }
  const auto* front = reinterpret_cast<FastFrontObject*>(self);
  if (!PyUnicode_CheckExact(v) && Py_TYPE(v) != reinterpret_cast<PyTypeObject*>(front->algoType)) return false;
  PyObject* code = PyDict_GetItemWithError(front->*codes, v);  // borrowed
  long long c;
  if (code == nullptr || !fastInteger(code, 0, INT_MAX, c)) {
    PyErr_Clear();
    return false;
  }
  out = static_cast<int>(c);
  return true;
}

// A group rank argument of FastCalls (an int; TypeError otherwise).
bool rankArgument(const char* method, PyObject* v, int& out) {
  long long r;
  if (!fastInteger(v, INT_MIN, INT_MAX, r)) {
    PyErr_Format(PyExc_TypeError, "%s: a rank is an int, got %s", method, Py_TYPE(v)->tp_name);
    return false;
  }
  out = static_cast<int>(r);
  return true;
}

// ---- FastCalls: group ranks ----------------------------------------------------------------

PyObject* callsAllReduce(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("all_reduce(tensor, op)", n, 2)) return nullptr;
  return guarded([&] { return calls(self)->allReduce(a[0], a[1]); });
}

PyObject* callsBroadcast(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  int root;
  if (!arity("broadcast(tensor, root)", n, 2) || !rankArgument("broadcast", a[1], root)) return nullptr;
  return guarded([&] { return calls(self)->broadcast(a[0], root); });
}

PyObject* callsReduce(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  int root;
  if (!arity("reduce(tensor, op, root)", n, 3) || !rankArgument("reduce", a[2], root)) return nullptr;
  return guarded([&] { return calls(self)->reduce(a[0], a[1], root); });
}

PyObject* callsBarrier(PyObject* self, PyObject* const*, Py_ssize_t n) {
  if (!arity("barrier()", n, 0)) return nullptr;
  return guarded([&] { return calls(self)->barrier(); });
}

PyObject* callsAllGather(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("all_gather(output, input)", n, 2)) return nullptr;
  return guarded([&] { return calls(self)->allGather(a[0], a[1]); });
}

PyObject* callsReduceScatter(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("reduce_scatter(output, input, op)", n, 3)) return nullptr;
  return guarded([&] { return calls(self)->reduceScatter(a[0], a[1], a[2]); });
}

PyObject* callsAllGatherList(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("all_gather_list(tensor_list, tensor)", n, 2)) return nullptr;
  return guarded([&] { return calls(self)->allGatherList(a[0], a[1]); });
}

PyObject* callsReduceScatterList(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("reduce_scatter_list(output, input_list, op)", n, 3)) return nullptr;
  return guarded([&] { return calls(self)->reduceScatterList(a[0], a[1], a[2]); });
}

PyObject* callsAllReduceCoalesced(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("all_reduce_coalesced(tensors, op)", n, 2)) return nullptr;
  return guarded([&] { return calls(self)->allReduceCoalesced(a[0], a[1]); });
}

PyObject* callsAllGatherCoalesced(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("all_gather_coalesced(output_tensor_lists, input_tensor_list)", n, 2)) return nullptr;
  return guarded([&] { return calls(self)->allGatherCoalesced(a[0], a[1]); });
}

PyObject* callsSend(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  int peer;
  if (!arity("send(tensor, peer, tag)", n, 3) || !rankArgument("send", a[1], peer)) return nullptr;
  return guarded([&] { return calls(self)->send(a[0], peer, a[2]); });
}

PyObject* callsRecv(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  int peer;
  if (!arity("recv(tensor, peer, tag)", n, 3) || !rankArgument("recv", a[1], peer)) return nullptr;
  return guarded([&] { return calls(self)->recv(a[0], peer, a[2]); });
}

PyObject* callsGather(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  int root;
  if (!arity("gather(tensor, gather_list, root)", n, 3) || !rankArgument("gather", a[2], root)) return nullptr;
  return guarded([&] { return calls(self)->gather(a[0], a[1], root); });
}

PyObject* callsScatter(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  int root;
  if (!arity("scatter(tensor, scatter_list, root)", n, 3) || !rankArgument("scatter", a[2], root)) return nullptr;
  return guarded([&] { return calls(self)->scatter(a[0], a[1], root); });
}

PyObject* callsAllToAll(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("all_to_all(outputs, inputs)", n, 2)) return nullptr;
  return guarded([&] { return calls(self)->allToAll(a[0], a[1]); });
}

PyObject* callsAllToAllSingle(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("all_to_all_single(output, input, output_splits, input_splits)", n, 4)) return nullptr;
  return guarded([&] { return calls(self)->allToAllSingle(a[0], a[1], a[2], a[3]); });
}

void callsDealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  delete calls(self);
  type->tp_free(self);
  Py_DECREF(type);
}

// ---- FastFront: the API's arguments --------------------------------------------------------

// The FastCalls of `group` (None: the default group), kept alive in `keep` for the call;
// nullptr where the call takes the general path (the file's comment says when). Leaves no
// Python error set.
FastCalls* resolve(PyObject* self, PyObject* group, py::object& keep) {
  static PyObject *kDefault = interned("default_group"), *kFast = interned("fast"),
                  *kProfiler = interned("torch.autograd.profiler"), *kEnabled = interned("_is_profiler_enabled");
  auto* front = reinterpret_cast<FastFrontObject*>(self);
  if (front->profiler == nullptr) {
    PyObject* module = PyDict_GetItemWithError(front->modules, kProfiler);
    if (module != nullptr && PyModule_Check(module)) {
      Py_INCREF(module);  // a module lives as long as the process: held, not looked up again
      front->profiler = module;
      front->profilerDict = PyModule_GetDict(module);
    }
  }
  if (front->profiler != nullptr) {
    PyObject* on = PyDict_GetItemWithError(front->profilerDict, kEnabled);  // borrowed
    const int recording = on == nullptr ? 1 : PyObject_IsTrue(on);  // no flag (another torch): general
    if (recording != 0) {
      PyErr_Clear();
      return nullptr;
    }
  }
  PyObject* found = group == Py_None ? PyDict_GetItemWithError(front->worldDict, kDefault) : group;
  if (found == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  const py::object g = py::reinterpret_borrow<py::object>(found);  // held while its attribute is read
  keep = py::reinterpret_steal<py::object>(PyObject_GetAttr(g.ptr(), kFast));
  if (!keep || Py_TYPE(keep.ptr()) != fastCallsType) {
    PyErr_Clear();
    return nullptr;
  }
  return calls(keep.ptr());
}

// The method of FastFront for `call`, on a group's FastCalls found (declined otherwise).
template <class Call>
PyObject* onGroup(PyObject* self, PyObject* group, Call call) {
  return guarded([&]() -> py::object {
    py::object keep;
    FastCalls* f = resolve(self, group, keep);
    return f == nullptr ? fastDeclined() : call(*f);
  });
}

PyObject* frontAllReduce(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("all_reduce(group, tensor, op, algo)", n, 4)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) {
    int algo;
    if (!callAlgo(self, &FastFrontObject::allReduceAlgos, a[3], algo)) return fastDeclined();
    return f.allReduce(a[1], a[2], algo);
  });
}

PyObject* frontBroadcast(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("broadcast(group, tensor, src, algo)", n, 4)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) {
    const int root = f.groupRank(a[2]);
    int algo;
    if (root < 0 || !callAlgo(self, &FastFrontObject::broadcastAlgos, a[3], algo)) return fastDeclined();
    return f.broadcast(a[1], root, algo);
  });
}

PyObject* frontReduce(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("reduce(group, tensor, dst, op)", n, 4)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) {
    const int root = f.groupRank(a[2]);
    return root < 0 ? fastDeclined() : f.reduce(a[1], a[3], root);
  });
}

PyObject* frontBarrier(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("barrier(group)", n, 1)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) { return f.barrier(); });
}

PyObject* frontAllGather(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("all_gather(group, output, input, algo)", n, 4)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) {
    int algo;
    if (!callAlgo(self, &FastFrontObject::allGatherAlgos, a[3], algo)) return fastDeclined();
    return f.allGather(a[1], a[2], algo);
  });
}

PyObject* frontReduceScatter(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("reduce_scatter(group, output, input, op, algo)", n, 5)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) {
    int algo;
    if (!callAlgo(self, &FastFrontObject::reduceScatterAlgos, a[4], algo)) return fastDeclined();
    return f.reduceScatter(a[1], a[2], a[3], algo);
  });
}

PyObject* frontAllGatherList(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("all_gather_list(group, tensor_list, tensor, algo)", n, 4)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) {
    int algo;
    if (!callAlgo(self, &FastFrontObject::allGatherAlgos, a[3], algo)) return fastDeclined();
    return f.allGatherList(a[1], a[2], algo);
  });
}

PyObject* frontReduceScatterList(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("reduce_scatter_list(group, output, input_list, op, algo)", n, 5)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) {
    int algo;
    if (!callAlgo(self, &FastFrontObject::reduceScatterAlgos, a[4], algo)) return fastDeclined();
    return f.reduceScatterList(a[1], a[2], a[3], algo);
  });
}

PyObject* frontAllReduceCoalesced(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("all_reduce_coalesced(group, tensors, op)", n, 3)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) { return f.allReduceCoalesced(a[1], a[2]); });
}

PyObject* frontAllGatherCoalesced(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("all_gather_coalesced(group, output_tensor_lists, input_tensor_list)", n, 3)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) { return f.allGatherCoalesced(a[1], a[2]); });
}

PyObject* frontSend(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("send(group, tensor, dst, tag)", n, 4)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) {
    const int peer = f.groupRank(a[2]);
    return peer < 0 ? fastDeclined() : f.send(a[1], peer, a[3]);
  });
}

PyObject* frontRecv(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("recv(group, tensor, src, tag)", n, 4)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) {
    if (a[2] == Py_None) return f.recvAny(a[1], a[3]);
    const int peer = f.groupRank(a[2]);
    return peer < 0 ? fastDeclined() : f.recv(a[1], peer, a[3]);
  });
}

PyObject* frontGather(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("gather(group, tensor, gather_list, dst)", n, 4)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) {
    const int root = f.groupRank(a[3]);
    return root < 0 ? fastDeclined() : f.gather(a[1], a[2], root);
  });
}

PyObject* frontScatter(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("scatter(group, tensor, scatter_list, src)", n, 4)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) {
    const int root = f.groupRank(a[3]);
    return root < 0 ? fastDeclined() : f.scatter(a[1], a[2], root);
  });
}

PyObject* frontAllToAll(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("all_to_all(group, output_tensor_list, input_tensor_list)", n, 3)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) { return f.allToAll(a[1], a[2]); });
}

PyObject* frontAllToAllSingle(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (!arity("all_to_all_single(group, output, input, output_splits, input_splits)", n, 5)) return nullptr;
  return onGroup(self, a[0], [&](FastCalls& f) { return f.allToAllSingle(a[1], a[2], a[3], a[4]); });
}

void frontDealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  auto* front = reinterpret_cast<FastFrontObject*>(self);
  Py_XDECREF(front->world);
  Py_XDECREF(front->modules);
  Py_XDECREF(front->profiler);
  Py_XDECREF(front->algoType);
  Py_XDECREF(front->algoCodes);
  type->tp_free(self);
  Py_DECREF(type);
}

// ---- the types -----------------------------------------------------------------------------

PyObject* notFromPython(PyTypeObject* type, PyObject*, PyObject*) {
  PyErr_Format(PyExc_TypeError, "%s is made by pycollect._C (fast_calls, fast_front), not called", type->tp_name);
  return nullptr;
}

#define PYCOLLECT_FASTCALL(f) reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f)), METH_FASTCALL

PyMethodDef callsMethods[] = {
    {"all_reduce", PYCOLLECT_FASTCALL(callsAllReduce), "all_reduce(tensor, op)"},
    {"broadcast", PYCOLLECT_FASTCALL(callsBroadcast), "broadcast(tensor, root)"},
    {"reduce", PYCOLLECT_FASTCALL(callsReduce), "reduce(tensor, op, root)"},
    {"barrier", PYCOLLECT_FASTCALL(callsBarrier), "barrier()"},
    {"all_gather", PYCOLLECT_FASTCALL(callsAllGather), "all_gather(output, input)"},
    {"reduce_scatter", PYCOLLECT_FASTCALL(callsReduceScatter), "reduce_scatter(output, input, op)"},
    {"all_gather_list", PYCOLLECT_FASTCALL(callsAllGatherList), "all_gather_list(tensor_list, tensor)"},
    {"reduce_scatter_list", PYCOLLECT_FASTCALL(callsReduceScatterList), "reduce_scatter_list(output, input_list, op)"},
    {"all_reduce_coalesced", PYCOLLECT_FASTCALL(callsAllReduceCoalesced), "all_reduce_coalesced(tensors, op)"},
    {"all_gather_coalesced", PYCOLLECT_FASTCALL(callsAllGatherCoalesced), "all_gather_coalesced(output_tensor_lists, input_tensor_list)"},
    {"send", PYCOLLECT_FASTCALL(callsSend), "send(tensor, peer, tag)"},
    {"recv", PYCOLLECT_FASTCALL(callsRecv), "recv(tensor, peer, tag): a named peer only"},
    {"gather", PYCOLLECT_FASTCALL(callsGather), "gather(tensor, gather_list, root)"},
    {"scatter", PYCOLLECT_FASTCALL(callsScatter), "scatter(tensor, scatter_list, root)"},
    {"all_to_all", PYCOLLECT_FASTCALL(callsAllToAll), "all_to_all(outputs, inputs)"},
    {"all_to_all_single", PYCOLLECT_FASTCALL(callsAllToAllSingle), "all_to_all_single(output, input, output_splits, input_splits): chunks of the rows"},
    {nullptr, nullptr, 0, nullptr}};

PyMethodDef frontMethods[] = {
    {"all_reduce", PYCOLLECT_FASTCALL(frontAllReduce), "all_reduce(group, tensor, op, algo)"},
    {"broadcast", PYCOLLECT_FASTCALL(frontBroadcast), "broadcast(group, tensor, src, algo)"},
    {"reduce", PYCOLLECT_FASTCALL(frontReduce), "reduce(group, tensor, dst, op)"},
    {"barrier", PYCOLLECT_FASTCALL(frontBarrier), "barrier(group)"},
    {"all_gather", PYCOLLECT_FASTCALL(frontAllGather), "all_gather(group, output, input, algo)"},
    {"reduce_scatter", PYCOLLECT_FASTCALL(frontReduceScatter), "reduce_scatter(group, output, input, op, algo)"},
    {"all_gather_list", PYCOLLECT_FASTCALL(frontAllGatherList), "all_gather_list(group, tensor_list, tensor, algo)"},
    {"reduce_scatter_list", PYCOLLECT_FASTCALL(frontReduceScatterList),
     "reduce_scatter_list(group, output, input_list, op, algo)"},
    {"all_reduce_coalesced", PYCOLLECT_FASTCALL(frontAllReduceCoalesced), "all_reduce_coalesced(group, tensors, op)"},
    {"all_gather_coalesced", PYCOLLECT_FASTCALL(frontAllGatherCoalesced), "all_gather_coalesced(group, output_tensor_lists, input_tensor_list)"},
    {"send", PYCOLLECT_FASTCALL(frontSend), "send(group, tensor, dst, tag)"},
    {"recv", PYCOLLECT_FASTCALL(frontRecv), "recv(group, tensor, src, tag): src None for any rank, whose global rank comes back"},
    {"gather", PYCOLLECT_FASTCALL(frontGather), "gather(group, tensor, gather_list, dst)"},
    {"scatter", PYCOLLECT_FASTCALL(frontScatter), "scatter(group, tensor, scatter_list, src)"},
    {"all_to_all", PYCOLLECT_FASTCALL(frontAllToAll), "all_to_all(group, output_tensor_list, input_tensor_list)"},
    {"all_to_all_single", PYCOLLECT_FASTCALL(frontAllToAllSingle), "all_to_all_single(group, output, input, output_splits, input_splits)"},
    {nullptr, nullptr, 0, nullptr}};

#undef PYCOLLECT_FASTCALL

const char kCallsDoc[] =
    "A group's blocking calls on plain host buffers, in group ranks (bindings/fast_calls.h).\n"
    "Each returns None (ran to its end), False (declined: nothing issued) or the Work issued.";
const char kFrontDoc[] =
    "The API's fast calls: FastCalls' methods with the group (None: the default) first and\n"
    "global ranks; declined where the general path must run (register_fast_calls.cc).";

PyType_Slot callsSlots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(callsDealloc)},
                            {Py_tp_new, reinterpret_cast<void*>(notFromPython)},
                            {Py_tp_methods, callsMethods},
                            {Py_tp_doc, const_cast<char*>(kCallsDoc)},
                            {0, nullptr}};
PyType_Slot frontSlots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(frontDealloc)},
                            {Py_tp_new, reinterpret_cast<void*>(notFromPython)},
                            {Py_tp_methods, frontMethods},
                            {Py_tp_doc, const_cast<char*>(kFrontDoc)},
                            {0, nullptr}};
PyType_Spec callsSpec = {"pycollect._C.FastCalls", sizeof(FastCallsObject), 0, Py_TPFLAGS_DEFAULT, callsSlots};
PyType_Spec frontSpec = {"pycollect._C.FastFront", sizeof(FastFrontObject), 0, Py_TPFLAGS_DEFAULT, frontSlots};

PyTypeObject* makeType(py::module_& m, PyType_Spec& spec, const char* name) {
  PyObject* type = PyType_FromSpec(&spec);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::reinterpret_borrow<py::object>(type));
  return reinterpret_cast<PyTypeObject*>(type);  // the module's reference and this one: never freed
}

// An instance of `type` (its fields zeroed), or the Python error.
py::object allocate(PyTypeObject* type) {
  PyObject* o = type->tp_alloc(type, 0);
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(o);
}

}  // namespace

void registerFastCalls(py::module_& m) {
  fastCallsType = makeType(m, callsSpec, "FastCalls");
  fastFrontType = makeType(m, frontSpec, "FastFront");
  m.def(
      "fast_calls",
      [](std::shared_ptr<Communicator> comm, py::object lock, py::object pending, py::object releaseSettled,
         std::vector<int> ranks, int allReduce, int broadcast, int allGather, int reduceScatter) {
        if (static_cast<int>(ranks.size()) != comm->size()) throw InvalidArgument("fast_calls: one rank per member");
        FastAlgos algos{checkedAlgo(allReduce), checkedAlgo(broadcast), checkedAlgo(allGather),
                        checkedAlgo(reduceScatter)};
        py::object o = allocate(fastCallsType);
        reinterpret_cast<FastCallsObject*>(o.ptr())->impl =
            new FastCalls(std::move(comm), std::move(lock), std::move(pending), std::move(releaseSettled),
                          std::move(ranks), algos);
        return o;
      },
      py::arg("comm"), py::arg("lock"), py::arg("pending"), py::arg("release_settled"), py::arg("ranks"),
      py::arg("all_reduce_algo"), py::arg("broadcast_algo"), py::arg("all_gather_algo"),
      py::arg("reduce_scatter_algo"),
      "A group's FastCalls: its communicator, threading.Lock, deque of calls in flight, a WeakMethod of its "
      "_release_settled, its members' global ranks (sorted) and its default algorithms.");
  m.def(
      "fast_front",
      [](py::module_ world, py::object algoType, py::dict given) {
        py::dict algoCodes(given);  // a copy: the front's borrowed dicts live as long as it
        py::object o = allocate(fastFrontType);
        auto* front = reinterpret_cast<FastFrontObject*>(o.ptr());
        front->world = world.release().ptr();
        front->worldDict = PyModule_GetDict(front->world);
        front->modules = py::object(py::module_::import("sys").attr("modules")).release().ptr();
        // Every call's dict, checked here: a lookup on each call must find a dict.
        PyObject** each[] = {&front->allReduceAlgos, &front->allGatherAlgos, &front->reduceScatterAlgos,
                             &front->broadcastAlgos};
        const char* names[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast"};
        for (int k = 0; k < 4; ++k) {
          if (!algoCodes.contains(names[k]) || !py::isinstance<py::dict>(algoCodes[names[k]])) {
            throw InvalidArgument(std::string("fast_front: algo_codes has no dict for ") + names[k]);
          }
          *each[k] = py::object(algoCodes[names[k]]).ptr();  // borrowed: algoCodes holds it
        }
        front->algoType = algoType.release().ptr();
        front->algoCodes = algoCodes.release().ptr();
        return o;
      },
      py::arg("world"), py::arg("algo_type"), py::arg("algo_codes"),
      "The API's FastFront, finding groups through `world` (the pycollect.world module); a call's algo= "
      "is taken where it is an `algo_type` or a name that `algo_codes[call]` maps to its code.");
}

}  // namespace pycollect
