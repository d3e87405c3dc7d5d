// pycollect._torch: the torch backend's Python door (built against torch, with torch's
// pybind11, so that its classes derive from torch's c10d::Backend as Python sees it).
//
//   Backend(store, rank, size, communicator_capsule, timeout_s, blocking_wait, on_shutdown)
//       the "pycollect" backend over a formed engine group (pycollect._C.Communicator's
//       capsule(): both modules share one engine library, hence one Communicator type)
//   ProcessGroup(store, rank, size, backend, devices)
//       the torch group for it when it serves every device of its group (native.py says
//       when): torch's ProcessGroup with the backend for `devices`, named "pycollect" where
//       torch asks a group its backend's name (DDP's logging, pg.name()), and answering the
//       group's sequence number from the backend
//   NullBackend(rank, size)   the benchmarks' floor (null_backend.h)
//   TORCH_VERSION             the torch this module was built against
#include <torch/csrc/utils/pybind.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "torch_backend/backend.h"
#include "torch_backend/null_backend.h"

namespace py = pybind11;

namespace pycollect::torchb {

namespace {

// torch's ProcessGroup, named for its backend. A creator that returns a ProcessGroup has it
// used as the group as it is, for every device (torch's rule for backends written as
// groups); torch's own would be named "custom" and refuse the sequence number, which its
// ProcessGroup answers only for its own backend types.
class NamedGroup : public c10d::ProcessGroup {
 public:
  NamedGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, c10::intrusive_ptr<Backend> backend,
             const std::vector<std::string>& devices)
      : c10d::ProcessGroup(store, rank, size), backend_(backend) {
    for (const auto& device : devices) setBackend(c10::Device(device).type(), BackendType::CUSTOM, backend);
    setDefaultBackend(BackendType::CUSTOM);
  }
  const std::string getBackendName() const override { return "pycollect"; }
  void setSequenceNumberForGroup() override { backend_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return backend_->getSequenceNumberForGroup(); }

 private:
  c10::intrusive_ptr<Backend> backend_;
};

// A Python object kept by C++ that may be dropped on any thread: released under the GIL (or
// leaked while the interpreter is ending, when no Python may run).
struct Held {
  explicit Held(py::object o) : object(std::move(o)) {}
  ~Held() {
    if (pythonAlive()) {
      py::gil_scoped_acquire gil;
      object = py::object();
    } else {
      object.release();
    }
  }
  py::object object;
};

std::shared_ptr<Communicator> fromCapsule(const py::capsule& capsule) {
  void* p = PyCapsule_GetPointer(capsule.ptr(), kCommunicatorCapsule);
  if (p == nullptr) throw py::error_already_set();
  return *static_cast<std::shared_ptr<Communicator>*>(p);
}

}  // namespace

}  // namespace pycollect::torchb

PYBIND11_MODULE(_torch, m) {
  using namespace pycollect::torchb;
  py::module_::import("torch.distributed");  // c10d's classes registered first: our bases
  m.attr("TORCH_VERSION") = PYCOLLECT_TORCH_VERSION;
  // The API's fast calls read tensors through it (pycollect._C.know_tensor_reader).
  m.attr("tensor_reader") = py::capsule(reinterpret_cast<void*>(&readHostSpan), pycollect::kTensorReaderCapsule);
  py::class_<Backend, c10d::Backend, c10::intrusive_ptr<Backend>>(m, "Backend")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const py::capsule& comm,
                       double timeoutSec, bool blockingWait, const py::object& onShutdown) {
             Backend::Settings settings;
             settings.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeoutSec * 1000));
             settings.blockingWait = blockingWait;
             return c10::make_intrusive<Backend>(store, rank, size, fromCapsule(comm), settings,
                                                 onShutdown.is_none() ? nullptr : onShutdown.ptr());
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("communicator"), py::arg("timeout"),
           py::arg("blocking_wait") = false, py::arg("on_shutdown") = py::none())
      // Identifies the backend to pycollect.torch_backend (its engine group), across wrappers.
      .def_property_readonly("engine_key", [](const Backend& b) { return reinterpret_cast<uintptr_t>(&b); })
      // dist.shrink_group: `shrinker(excluded, flags)` returns the survivors' Backend (native.py).
      .def("set_shrinker",
           [](Backend& b, py::object shrinker) {
             auto held = std::make_shared<Held>(std::move(shrinker));
             b.setShrinker([held](const std::vector<int64_t>& excluded, int flags) {
               py::gil_scoped_acquire gil;
               return held->object(excluded, flags).cast<c10::intrusive_ptr<Backend>>();
             });
           },
           py::arg("shrinker"))
      // ProcessGroup.split_group: `splitter(store, ranks, timeout_s)` returns the child's Backend (native.py).
      .def("set_splitter",
           [](Backend& b, py::object splitter) {
             auto held = std::make_shared<Held>(std::move(splitter));
             b.setSplitter([held](const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                  double timeoutSec) {
               py::gil_scoped_acquire gil;
               return held->object(store, ranks, timeoutSec).cast<c10::intrusive_ptr<Backend>>();
             });
           },
           py::arg("splitter"))
      .def("monitored_barrier",
           [](Backend& b, double timeoutSec, bool waitAllRanks) {
             c10d::BarrierOptions opts;
             opts.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeoutSec * 1000));
             b.monitoredBarrier(opts, waitAllRanks);
           },
           py::arg("timeout"), py::arg("wait_all_ranks") = false, py::call_guard<py::gil_scoped_release>());
  py::class_<NamedGroup, c10d::ProcessGroup, c10::intrusive_ptr<NamedGroup>>(m, "ProcessGroup")
      .def(py::init<const c10::intrusive_ptr<c10d::Store>&, int, int, c10::intrusive_ptr<Backend>,
                    const std::vector<std::string>&>(),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("backend"), py::arg("devices"));
  py::class_<NullBackend, c10d::Backend, c10::intrusive_ptr<NullBackend>>(m, "NullBackend")
      .def(py::init<int, int>(), py::arg("rank"), py::arg("size"));
}
