// The backend's plumbing: making and launching Works, where tensors live, coalescing,
// barriers, sequence numbers and teardown. The calls themselves: collectives.cc and
// point_to_point.cc.
#include "torch_backend/backend.h"

#include <ATen/record_function.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <thread>

namespace pycollect::torchb {

bool pythonAlive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

namespace {

// The profiler's name for a Work of `type`: Gloo's "gloo:<call>" names with our prefix
// (the coalesced and base forms share their call's name, as on Gloo).
const char* profilingTitle(OpType type) {
  switch (type) {
    case OpType::BROADCAST: return "pycollect:broadcast";
    case OpType::ALLREDUCE:
    case OpType::ALLREDUCE_COALESCED: return "pycollect:all_reduce";
    case OpType::_ALLREDUCE_SPARSE: return "pycollect:sparse_all_reduce";
    case OpType::REDUCE: return "pycollect:reduce";
    case OpType::ALLGATHER:
    case OpType::_ALLGATHER_BASE:
    case OpType::ALLGATHER_COALESCED: return "pycollect:all_gather";
    case OpType::GATHER: return "pycollect:gather";
    case OpType::SCATTER: return "pycollect:scatter";
    case OpType::REDUCE_SCATTER:
    case OpType::_REDUCE_SCATTER_BASE:
    case OpType::REDUCE_SCATTER_TENSOR_COALESCED: return "pycollect:reduce_scatter";
    case OpType::ALLTOALL:
    case OpType::ALLTOALL_BASE: return "pycollect:all_to_all";
    case OpType::SEND: return "pycollect:send";
    case OpType::RECV: return "pycollect:recv";
    case OpType::RECVANYSOURCE: return "pycollect:recvAnySource";
    case OpType::BARRIER: return "pycollect:barrier";
    case OpType::COALESCED: return "pycollect:coalesced";
    default: return "pycollect:call";
  }
}

}  // namespace

Backend::Backend(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::shared_ptr<Communicator> comm,
                 Settings settings, PyObject* onShutdown)
    : c10d::Backend(rank, size),
      store_(std::move(store)),
      comm_(std::move(comm)),
      settings_(settings),
      onShutdown_(onShutdown) {
  Py_XINCREF(onShutdown_);  // called with the GIL held (the module's constructor binding)
}

Backend::~Backend() {
  // Dropped without shutdown() (torch failed to set up another device of its group, as
  // "cpu:pycollect,cuda:nccl" without NCCL; or a group never destroyed): the engine group
  // goes with it, as a Gloo backend's connections do, instead of staying formed and
  // registered with nobody to use it.
  release();
}

c10::intrusive_ptr<TorchWork> Backend::make(OpType type, const char* method, std::vector<at::Tensor> outputs) {
  // c10d::Work makes a RecordFunction for a title whether or not anything records: only
  // while a profiler (a RecordFunction callback of its scope) is on. The same ask as the
  // RecordFunction's own, through torch's per-thread cache (at::hasCallbacks reads a
  // snapshot of the global callbacks on every call).
  const bool recording = at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE).has_value();
  return c10::make_intrusive<TorchWork>(rank_, type, method, std::move(outputs), comm_, settings_.blockingWait,
                                        recording ? profilingTitle(type) : nullptr);
}

WorkPtr Backend::launch(c10::intrusive_ptr<TorchWork> work) {
  auto started = TorchWork::start(std::move(work));
  if (coalescing_) coalesced_.push_back(started);
  return started;
}

bool Backend::hostStaged() const { return comm_->stagesHostMemory(); }

DeviceCall Backend::deviceCall(const Buffer& b, const char* method) {
  if (b.device < 0) return DeviceCall{0, 0};  // the host device (tests): its stream 0
  if (cudaDevice_ < 0) {
    cudaDevice_ = b.device;
  } else if (b.device != cudaDevice_) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, ": tensor is on cuda:", b.device,
                                         " but this group's CUDA device is cuda:", cudaDevice_,
                                         " (the device of its first CUDA call); use one device per group"));
  }
  return DeviceCall{b.device, currentStream(b.device)};
}

at::Tensor Backend::hostInput(const at::Tensor& t) {
  if (!t.is_cuda()) return t;
  return t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);  // after the work on the caller's stream
}

at::Tensor Backend::hostOutput(const at::Tensor& t, std::vector<std::pair<at::Tensor, at::Tensor>>& back) {
  if (!t.is_cuda()) return t;
  at::Tensor host = t.to(at::kCPU, false, true);  // its contents too: a rank that does not write it keeps them
  back.emplace_back(t, host);
  return host;
}

void Backend::copyBackWhenDone(c10::intrusive_ptr<TorchWork>& work,
                               std::vector<std::pair<at::Tensor, at::Tensor>> back) {
  if (back.empty()) return;
  work->addFinish([back = std::move(back)] {
    for (const auto& [device, host] : back) {
      c10::DeviceGuard guard(device.device());
      device.copy_(host);  // pageable host memory: the copy has ended when it returns
    }
  });
}

double Backend::timeoutSec(std::chrono::milliseconds t) const {
  if (t <= std::chrono::milliseconds(0)) return -1;  // unset: the group's
  return std::chrono::duration<double>(t).count();
}

void Backend::startCoalescing() {
  if (coalescing_) C10_THROW_ERROR(ValueError, "pycollect backend: startCoalescing while already coalescing");
  coalescing_ = true;
  coalesced_.clear();
}

WorkPtr Backend::endCoalescing() {
  if (!coalescing_) C10_THROW_ERROR(ValueError, "pycollect backend: endCoalescing without startCoalescing");
  coalescing_ = false;
  // One Work for the batch, done when every call of it is settled (their engine operations
  // were issued as each call came: a batch of sends and recvs is all posted by now). Each
  // call's Future finishes a marker the batch's Work waits on.
  auto work = make(OpType::COALESCED, "coalesced", {});
  std::vector<c10::intrusive_ptr<TorchWork>> parts;
  parts.swap(coalesced_);
  for (auto& p : parts) {
    auto marker = std::make_shared<pycollect::Work>("a call of the coalesced batch");
    p->getFuture()->addCallback([marker](c10::ivalue::Future& f) {
      marker->finish(f.hasError() ? f.exception_ptr() : nullptr);
    });
    work->add(marker);
  }
  return TorchWork::start(work);
}

WorkPtr Backend::barrier(const c10d::BarrierOptions& opts) {
  return run(make(OpType::BARRIER, "barrier", {}), !opts.asyncOp,
             [&](TorchWork& w) { w.add(comm_->barrier(timeoutSec(opts.timeout))); });
}

void Backend::setTimeout(std::chrono::milliseconds timeout) {
  if (timeout <= std::chrono::milliseconds(0)) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: setTimeout: the timeout must be positive, got ",
                                         timeout.count(), " ms"));
  }
  settings_.timeout = timeout;
  comm_->setTimeout(std::chrono::duration<double>(timeout).count());
}

namespace {

// Whether `key` appears in `store` before `deadline`.
bool waitKey(c10d::Store& store, const std::string& key, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    if (store.check({key})) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

void Backend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  // Unset (negative): the group's timeout. Zero: rank 0 has no time at all, as with Gloo.
  const auto timeout = opts.timeout >= std::chrono::milliseconds(0) ? opts.timeout : settings_.timeout;
  const auto ms = timeout.count();
  if (rank_ == 0 && ms == 0) {
    C10_THROW_ERROR(DistBackendError, c10::str("Rank 0 timed out in monitoredBarrier after 0 ms."));
  }
  const std::string key = "monitored_barrier/" + std::to_string(monitored_++);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  store_->set(key + "/arrived/" + std::to_string(rank_), std::vector<uint8_t>{'1'});
  if (rank_ != 0) {
    if (!waitKey(*store_, key + "/released", deadline)) {
      C10_THROW_ERROR(DistBackendError,
                      c10::str("Rank ", rank_, " successfully reached monitoredBarrier, but received errors while "
                               "waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank "
                               "(pycollect backend: not released within ", ms, " ms)."));
    }
    return;
  }
  std::vector<int> missing;
  for (int r = 1; r < size_; ++r) {
    if (!waitKey(*store_, key + "/arrived/" + std::to_string(r), deadline)) {
      if (!waitAllRanks) {
        C10_THROW_ERROR(DistBackendError, c10::str("Rank ", r, " failed to pass monitoredBarrier in ", ms, " ms"));
      }
      missing.push_back(r);
    }
  }
  if (!missing.empty()) {
    std::string names;
    for (int r : missing) names += (names.empty() ? "" : ", ") + std::to_string(r);
    C10_THROW_ERROR(DistBackendError, c10::str("Ranks ", names, " failed to pass monitoredBarrier in ", ms, " ms"));
  }
  store_->set(key + "/released", std::vector<uint8_t>{'1'});
}

void Backend::setSequenceNumberForGroup() { seq_.store(0); }  // every rank starts the group at 0

uint64_t Backend::getSequenceNumberForGroup() { return seq_.load(); }

void Backend::release() {
  shrinker_ = nullptr;  // drop their Python objects (under the GIL, module.cc)
  splitter_ = nullptr;
  splitChild_.reset();
  splitStore_.reset();
  PyObject* callback = onShutdown_;
  onShutdown_ = nullptr;
  if (callback != nullptr && pythonAlive()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *type, *value, *trace;
    PyErr_Fetch(&type, &value, &trace);  // a destructor may run while an exception unwinds
    PyObject* result = PyObject_CallNoArgs(callback);
    if (result == nullptr) PyErr_Clear();  // teardown goes on: the links close below regardless
    Py_XDECREF(result);
    Py_DECREF(callback);
    PyErr_Restore(type, value, trace);
    PyGILState_Release(gil);
  }
  comm_->shutdown();
}

void Backend::shutdown() { release(); }

c10::intrusive_ptr<c10d::Backend> Backend::shrink(const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
                                                  const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride) {
  if (!shrinker_) C10_THROW_ERROR(NotImplementedError, "pycollect backend: shrink: this backend cannot shrink");
  if (optsOverride) {
    C10_THROW_ERROR(NotImplementedError, "pycollect backend: shrink: the new group takes the group's own options "
                                         "(pg_options is not supported)");
  }
  return shrinker_(ranksToExclude, shrinkFlags);
}

c10::intrusive_ptr<c10d::Backend> Backend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                 const std::vector<int>& ranks,
                                                 const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  if (!splitter_) C10_THROW_ERROR(NotImplementedError, "pycollect backend: split: this backend cannot split");
  if (splitChild_ && splitStore_ == store && splitRanks_ == ranks) return splitChild_;  // another device's ask
  const double timeoutSec = opts && opts->timeout.count() > 0 ? std::chrono::duration<double>(opts->timeout).count()
                                                              : -1;
  splitChild_ = splitter_(store, ranks, timeoutSec);
  splitStore_ = store;
  splitRanks_ = ranks;
  return splitChild_;
}

void Backend::abort() { release(); }

}  // namespace pycollect::torchb
