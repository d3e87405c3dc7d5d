// pycollect._C.FastCalls: the API's blocking calls on plain host buffers, in one crossing
// (pycollect/api.py tries it first; ProcessGroup.fast holds one): all_reduce, broadcast,
// reduce, all_gather_into_tensor, reduce_scatter_tensor, send, and recv from a named rank.
//
// An 8-byte all-reduce costs the engine half a microsecond, and the general path spent
// three more in Python around it: a Buffer object, the op, the algorithm and the device
// path resolved, then the group's lock and its list of calls in flight. Here the common
// case is answered in C++: C-contiguous numpy arrays or CPU torch tensors of an engine
// dtype (host_span.h), an op given as an int (pycollect.ReduceOp is one), the group's own
// algorithm, nothing of the group's still running. Such a call takes the group's lock as
// the general path does (calls stay in issue order across threads), runs on this thread
// with the GIL released, and returns None when it ran to its end.
//
// Anything else is declined before anything is issued: False comes back, and Python takes
// the general path, which raises the errors that name what is wrong (refusals live in one
// place: a wrong size or a dtype that differs between two buffers is declined here too).
// A call issued here that did not end here (queued behind another thread's, or failed)
// comes back as the engine's Work, already in the group's list of calls in flight with its
// buffers, and Python waits on it as on any blocking call.
#include <pybind11/pybind11.h>

#include <climits>
#include <cstdint>
#include <memory>

#include "bindings/blocking.h"
#include "bindings/host_span.h"
#include "bindings/register.h"
#include "comm/communicator.h"
#include "common/types.h"

namespace py = pybind11;

namespace pycollect {

namespace {

void* ptr(const HostSpan& s) { return reinterpret_cast<void*>(s.address); }
DType dtypeOf(const HostSpan& s) { return static_cast<DType>(s.dtype); }

// Default algorithms of the group's calls with a choice (ProcessGroup._default_algos).
struct Algos {
  Algo allReduce, broadcast, allGather, reduceScatter;
};

class FastCalls {
 public:
  // `lock` and `pending`: the group's threading.Lock and deque of calls in flight
  // (pycollect/group.py); `releaseSettled`: a weakref.WeakMethod of the group's method that
  // drops those the engine is done with (under the lock): weak, so that the group and this
  // object make no cycle (one the garbage collector cannot see through this object).
  FastCalls(std::shared_ptr<Communicator> comm, const py::object& lock, py::object pending,
            py::object releaseSettled, Algos algos)
      : comm_(std::move(comm)),
        acquire_(lock.attr("acquire")),
        release_(lock.attr("release")),
        pending_(std::move(pending)),
        releaseSettled_(std::move(releaseSettled)),
        algos_(algos) {}

  py::object allReduce(py::handle tensor, py::handle op) {
    ReduceOp o;
    if (!reduceOp(op, o)) return declined();
    return run({tensor}, {true}, [&](const HostSpan* s) {
      return comm_->allReduce(ptr(s[0]), s[0].count, dtypeOf(s[0]), o, algos_.allReduce);
    });
  }

  // `root`, `peer`: group ranks (Python maps the global ones).
  py::object broadcast(py::handle tensor, int root) {
    return run({tensor}, {true}, [&](const HostSpan* s) {
      return comm_->broadcast(ptr(s[0]), s[0].count, dtypeOf(s[0]), root, algos_.broadcast);
    });
  }

  py::object reduce(py::handle tensor, py::handle op, int root) {
    ReduceOp o;
    if (!reduceOp(op, o)) return declined();
    return run({tensor}, {true}, [&](const HostSpan* s) {
      return comm_->reduce(ptr(s[0]), s[0].count, dtypeOf(s[0]), o, root);
    });
  }

  // output = every rank's input, in rank order.
  py::object allGather(py::handle output, py::handle input) {
    return run({input, output}, {false, true}, [&](const HostSpan* s) -> std::shared_ptr<Work> {
      if (s[0].dtype != s[1].dtype || s[1].count != s[0].count * static_cast<size_t>(comm_->size())) return nullptr;
      return comm_->allGather(ptr(s[0]), ptr(s[1]), s[0].count, dtypeOf(s[0]), algos_.allGather);
    });
  }

  py::object reduceScatter(py::handle output, py::handle input, py::handle op) {
    ReduceOp o;
    if (!reduceOp(op, o)) return declined();
    return run({input, output}, {false, true}, [&](const HostSpan* s) -> std::shared_ptr<Work> {
      if (s[0].dtype != s[1].dtype || s[0].count != s[1].count * static_cast<size_t>(comm_->size())) return nullptr;
      return comm_->reduceScatter(ptr(s[0]), ptr(s[1]), s[1].count, dtypeOf(s[0]), o, algos_.reduceScatter);
    });
  }

  py::object send(py::handle tensor, int peer, py::handle tag) {
    int t;
    if (!messageTag(tag, t)) return declined();
    return run({tensor}, {false}, [&](const HostSpan* s) {
      return comm_->send(ptr(s[0]), s[0].count, dtypeOf(s[0]), peer, t);
    });
  }

  // From a named rank only: a receive from any source keeps its Work (it names the sender).
  py::object recv(py::handle tensor, int peer, py::handle tag) {
    int t;
    if (peer == kAnySource || !messageTag(tag, t)) return declined();
    return run({tensor}, {true}, [&](const HostSpan* s) -> std::shared_ptr<Work> {
      return comm_->recv(ptr(s[0]), s[0].count, dtypeOf(s[0]), peer, t);
    });
  }

 private:
  static py::object declined() { return py::bool_(false); }

  // An int (not a bool) in [lo, hi], into `out`; false for anything else.
  static bool integer(py::handle v, long long lo, long long hi, long long& out) {
    if (!PyLong_Check(v.ptr()) || PyBool_Check(v.ptr())) return false;
    int overflow = 0;
    out = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (out == -1 && PyErr_Occurred()) PyErr_Clear();
    return overflow == 0 && out >= lo && out <= hi;
  }
  static bool reduceOp(py::handle v, ReduceOp& out) {
    long long code;
    if (!integer(v, 0, kNumReduceOps - 1, code)) return false;
    out = static_cast<ReduceOp>(code);
    return true;
  }
  static bool messageTag(py::handle v, int& out) {  // a 32-bit tag, as api._check_tag
    long long t;
    if (!integer(v, INT32_MIN, INT32_MAX, t)) return false;
    out = static_cast<int>(t);
    return true;
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

  // The call on `buffers` (each written where `writes` says), or declined. `issue` runs
  // without the GIL and returns nullptr to decline (the buffers do not fit together).
  template <size_t N, class Issue>
  py::object run(const py::handle (&buffers)[N], const bool (&writes)[N], Issue issue) {
    HostSpan spans[N];
    for (size_t i = 0; i < N; ++i) {
      if (!plainArraySpan(buffers[i].ptr(), writes[i], spans[i]) &&
          !plainTensorSpan(buffers[i].ptr(), writes[i], spans[i])) {
        return declined();
      }
    }
    Held held(*this);
    if (inFlight() != 0) {  // calls issued before: the buffers of those that ended are dropped
      py::object release = releaseSettled_();
      if (!release.is_none()) release();
      if (inFlight() != 0) return declined();  // one still runs: the general path queues behind it
    }
    std::shared_ptr<Work> work;
    {
      py::gil_scoped_release nogil;  // the engine touches no Python object
      Blocking scope(true);
      work = issue(spans);
    }
    if (work == nullptr) return declined();
    if (work->isCompleted() && !work->failed()) return py::none();
    py::object w = py::cast(work);
    py::tuple keep(N);
    for (size_t i = 0; i < N; ++i) keep[i] = py::reinterpret_borrow<py::object>(buffers[i]);
    pending_.attr("append")(py::make_tuple(w, keep));  // the buffers live until it ends
    return w;
  }

  Py_ssize_t inFlight() const {
    const Py_ssize_t n = PyObject_Size(pending_.ptr());
    if (n < 0) throw py::error_already_set();
    return n;
  }

  std::shared_ptr<Communicator> comm_;
  py::object acquire_, release_, pending_, releaseSettled_;
  const Algos algos_;
};

}  // namespace

void registerFastCalls(py::module_& m) {
  py::class_<FastCalls>(m, "FastCalls")
      .def(py::init([](std::shared_ptr<Communicator> comm, const py::object& lock, py::object pending,
                       py::object releaseSettled, int allReduce, int broadcast, int allGather, int reduceScatter) {
             return FastCalls(std::move(comm), lock, std::move(pending), std::move(releaseSettled),
                              Algos{checkedAlgo(allReduce), checkedAlgo(broadcast), checkedAlgo(allGather),
                                    checkedAlgo(reduceScatter)});
           }),
           py::arg("comm"), py::arg("lock"), py::arg("pending"), py::arg("release_settled"), py::arg("all_reduce_algo"),
           py::arg("broadcast_algo"), py::arg("all_gather_algo"), py::arg("reduce_scatter_algo"))
      .def("all_reduce", &FastCalls::allReduce, py::arg("tensor"), py::arg("op"))
      .def("broadcast", &FastCalls::broadcast, py::arg("tensor"), py::arg("root"))
      .def("reduce", &FastCalls::reduce, py::arg("tensor"), py::arg("op"), py::arg("root"))
      .def("all_gather", &FastCalls::allGather, py::arg("output"), py::arg("input"))
      .def("reduce_scatter", &FastCalls::reduceScatter, py::arg("output"), py::arg("input"), py::arg("op"))
      .def("send", &FastCalls::send, py::arg("tensor"), py::arg("peer"), py::arg("tag"))
      .def("recv", &FastCalls::recv, py::arg("tensor"), py::arg("peer"), py::arg("tag"));
}

}  // namespace pycollect
