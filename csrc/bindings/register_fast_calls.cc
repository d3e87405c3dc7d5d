// pycollect._C.FastCalls: the API's blocking all_reduce and broadcast of one plain host
// buffer, in one crossing (pycollect/api.py tries it first; ProcessGroup.fast holds one).
//
// An 8-byte all-reduce costs the engine half a microsecond, and the general path spent
// three more in Python around it: a Buffer object, the op, the algorithm and the device
// path resolved, then the group's lock and its list of calls in flight. Here the common
// case is answered in C++: a C-contiguous numpy array or a CPU torch tensor of an engine
// dtype (host_span.h), an op given as an int (pycollect.ReduceOp is one), the group's own
// algorithm, nothing of the group's still in flight. Such a call takes the group's lock as
// the general path does (calls stay in issue order across threads), runs on this thread
// with the GIL released, and returns None when it ran to its end.
//
// Anything else is declined before anything is issued: False comes back, and Python takes
// the general path, which raises the errors that name what is wrong (refusals live in one
// place). A call issued here that did not end here (queued behind another thread's, or
// failed) comes back as the engine's Work, already in the group's list of calls in flight
// with its buffer, and Python waits on it as on any blocking call.
#include <pybind11/pybind11.h>

#include <memory>

#include "bindings/blocking.h"
#include "bindings/host_span.h"
#include "bindings/register.h"
#include "comm/communicator.h"
#include "common/types.h"

namespace py = pybind11;

namespace pycollect {

namespace {

class FastCalls {
 public:
  // `lock` and `pending`: the group's threading.Lock and deque (pycollect/group.py).
  FastCalls(std::shared_ptr<Communicator> comm, const py::object& lock, py::object pending, int allReduceAlgo,
            int broadcastAlgo)
      : comm_(std::move(comm)),
        acquire_(lock.attr("acquire")),
        release_(lock.attr("release")),
        pending_(std::move(pending)),
        allReduceAlgo_(checkedAlgo(allReduceAlgo)),
        broadcastAlgo_(checkedAlgo(broadcastAlgo)) {}

  py::object allReduce(py::handle tensor, py::handle op) {
    long long code;
    if (!smallInt(op, kNumReduceOps, code)) return py::bool_(false);
    return run(tensor, [&](const HostSpan& s) {
      return comm_->allReduce(reinterpret_cast<void*>(s.address), s.count, static_cast<DType>(s.dtype),
                              static_cast<ReduceOp>(code), allReduceAlgo_);
    });
  }

  // `root`: the group rank of the source (Python maps the global rank).
  py::object broadcast(py::handle tensor, int root) {
    return run(tensor, [&](const HostSpan& s) {
      return comm_->broadcast(reinterpret_cast<void*>(s.address), s.count, static_cast<DType>(s.dtype), root,
                              broadcastAlgo_);
    });
  }

 private:
  // An int (not a bool) in [0, limit): the ops' codes.
  static bool smallInt(py::handle v, long long limit, long long& out) {
    if (!PyLong_Check(v.ptr()) || PyBool_Check(v.ptr())) return false;
    out = PyLong_AsLongLong(v.ptr());
    if (out == -1 && PyErr_Occurred()) PyErr_Clear();
    return out >= 0 && out < limit;
  }

  // The group's lock, held for one call; released on every way out (the GIL held then).
  class Held {
   public:
    explicit Held(FastCalls& f) : f_(f) {
      PyObject* r = PyObject_CallNoArgs(f_.acquire_.ptr());
      if (r == nullptr) throw py::error_already_set();
      Py_DECREF(r);
    }
    ~Held() {
      PyObject* r = PyObject_CallNoArgs(f_.release_.ptr());
      if (r == nullptr) PyErr_WriteUnraisable(f_.release_.ptr());  // only if the lock was not ours
      Py_XDECREF(r);
    }
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;

   private:
    FastCalls& f_;
  };

  template <class Issue>
  py::object run(py::handle tensor, Issue issue) {
    HostSpan span;
    if (!plainArraySpan(tensor.ptr(), true, span) && !plainTensorSpan(tensor.ptr(), true, span)) {
      return py::bool_(false);
    }
    Held held(*this);
    const Py_ssize_t inFlight = PyObject_Size(pending_.ptr());
    if (inFlight != 0) {  // the general path first drops the buffers of the calls that ended
      if (inFlight < 0) throw py::error_already_set();
      return py::bool_(false);
    }
    std::shared_ptr<Work> work;
    {
      py::gil_scoped_release nogil;  // the engine touches no Python object
      Blocking scope(true);
      work = issue(span);
    }
    if (work->isCompleted() && !work->failed()) return py::none();
    py::object w = py::cast(work);
    pending_.attr("append")(py::make_tuple(w, py::make_tuple(tensor)));  // the buffer lives until it ends
    return w;
  }

  std::shared_ptr<Communicator> comm_;
  py::object acquire_, release_, pending_;
  const Algo allReduceAlgo_, broadcastAlgo_;
};

}  // namespace

void registerFastCalls(py::module_& m) {
  py::class_<FastCalls>(m, "FastCalls")
      .def(py::init<std::shared_ptr<Communicator>, const py::object&, py::object, int, int>(), py::arg("comm"),
           py::arg("lock"), py::arg("pending"), py::arg("all_reduce_algo"), py::arg("broadcast_algo"))
      .def("all_reduce", &FastCalls::allReduce, py::arg("tensor"), py::arg("op"))
      .def("broadcast", &FastCalls::broadcast, py::arg("tensor"), py::arg("root"));
}

}  // namespace pycollect
