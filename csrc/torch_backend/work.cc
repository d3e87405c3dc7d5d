#include "torch_backend/work.h"

#include <ATen/core/jit_type.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "comm/staged_work.h"
#include "common/error.h"
#include "common/interrupt.h"
#include "torch_backend/tensors.h"

namespace pycollect::torchb {

namespace {

std::vector<c10::Device> cudaDevices(const std::vector<at::Tensor>& outputs) {
  std::vector<c10::Device> devices;
  for (const auto& t : outputs) {
    if (t.is_cuda() && std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
      devices.push_back(t.device());
    }
  }
  return devices;
}

c10::intrusive_ptr<c10::ivalue::Future> makeFuture(std::vector<c10::Device> devices) {
  // ofTensors: torch's one List[Tensor] type, not a new one made on every call.
  return c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors(), std::move(devices));
}

}  // namespace

std::exception_ptr torchError(const char* method, std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error&) {
    return std::current_exception();  // already torch's
  } catch (const TimeoutError& e) {
    return std::make_exception_ptr(c10::DistBackendError(
        {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
        c10::str("pycollect backend: ", method, " Timed out (the group's timeout): ", e.what())));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(c10::DistBackendError(
        {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, c10::str("pycollect backend: ", method, ": ", e.what())));
  }
}

TorchWork::TorchWork(int rank, c10d::OpType type, const char* method, std::vector<at::Tensor> outputs,
                     std::shared_ptr<Communicator> comm, bool blockingWait, const char* profilingTitle)
    : c10d::Work(rank, type, profilingTitle),
      method_(method),
      outputs_(std::move(outputs)),
      comm_(std::move(comm)),
      blockingWait_(blockingWait) {
  auto devices = cudaDevices(outputs_);
  if (!devices.empty()) future_ = makeFuture(std::move(devices));  // completed where the result is (settle)
}

TorchWork::~TorchWork() = default;

c10::intrusive_ptr<TorchWork> TorchWork::start(c10::intrusive_ptr<TorchWork> self) {
  // The +1: no hook settles it before every hook is set.
  self->pending_.store(self->engine_.size() + 1);
  size_t over = 1;
  for (auto& w : self->engine_) {
    if (w->isCompleted()) {  // ran to its end already (a blocking call run inline): no hook
      ++over;
      continue;
    }
    // The hook holds the Work: it completes even if the caller drops it.
    w->whenDone([self] { self->engineDone(); });
  }
  if (self->pending_.fetch_sub(over) == over) self->settle();
  return self;
}

void TorchWork::addFailed(std::exception_ptr error) {
  auto failed = std::make_shared<pycollect::Work>(method_);
  failed->finish(error);
  add(std::move(failed));
}

c10::intrusive_ptr<TorchWork> TorchWork::done(int rank, c10d::OpType type, const char* method,
                                              std::vector<at::Tensor> outputs, std::exception_ptr error) {
  auto w = c10::make_intrusive<TorchWork>(rank, type, method, std::move(outputs), nullptr, false);
  if (error) w->addFailed(error);
  return start(std::move(w));
}

void TorchWork::engineDone() {
  if (pending_.fetch_sub(1) == 1) settle();
}

void TorchWork::settle() {
  std::exception_ptr error;
  for (auto& w : engine_) {
    if (!w->failed()) continue;  // every one is over by now
    try {
      w->wait(0);  // rethrows its error
    } catch (...) {
      error = std::current_exception();
      break;
    }
  }
  if (!error && staged_) {
    // Readers of the result (the finish step, the Future's consumers) need it in device
    // memory. On CUDA this thread's stream waits for it: the finish step's copies and the
    // Future's event are queued there. The host device of the tests has no such stream,
    // so the host waits.
    try {
      for (auto& w : engine_) {
        auto* s = dynamic_cast<StagedWork*>(w.get());
        if (s == nullptr) continue;
        if (device_ < 0 || !s->streamWait(currentStream(device_))) s->waitDevice(-1);
      }
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (!error && !finish_.empty()) {
    try {
      at::ThreadLocalStateGuard callers(*tls_);
      c10::OptionalDeviceGuard guard;
      if (device_ >= 0) guard.reset_device(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_)));
      for (auto& step : finish_) step();
      if (device_ >= 0 && staged_) {
        // Its copies were queued on this thread's stream; the caller's wait() returns on the
        // host, so they end first.
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
            ->getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_)))
            .synchronize();
      }
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (error) error = torchError(method_, error);
  // The Future first (its callbacks run here), then the Work: wait() and isCompleted() see
  // the callbacks' effects, as on Gloo. A Future nobody asked for yet is completed by
  // getFuture when asked.
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!future_ && staged_) future_ = makeFuture(cudaDevices(outputs_));  // on this thread, whose stream has the result
    futureError_ = error;
    outcomeKnown_ = true;
    future = future_;
  }
  if (future) completeFuture(*future);
  c10d::Work::finish(error);  // completed_, exception_, waiters woken, the profiler's event ended
  std::lock_guard<std::mutex> lock(mutex_);
  engine_.clear();  // wait() reads it under the lock
}

bool TorchWork::isCompleted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool TorchWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr TorchWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

int TorchWork::sourceRank() const {
  if (opType_ != c10d::OpType::RECVANYSOURCE && opType_ != c10d::OpType::RECV) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method_, " has no source rank (only a recv has one)"));
  }
  const_cast<TorchWork*>(this)->wait();
  return source_;
}

std::vector<at::Tensor> TorchWork::result() {
  wait();
  return outputs_;
}

void TorchWork::synchronize() { wait(); }

bool TorchWork::streamWait() {
  if (!staged_ || blockingWait_ || !finish_.empty()) return false;
  if (device_ < 0 && !comm_->hostStreamWait()) return false;  // the host device: tests read on the host
  EngineWorks engine;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return false;  // settled: the ordinary path (its error, if any)
    engine = engine_;
  }
  const uintptr_t stream = device_ >= 0 ? currentStream(device_) : 0;  // the host device's is 0
  for (auto& w : engine) {
    auto* s = dynamic_cast<StagedWork*>(w.get());
    if (s == nullptr || !s->streamWait(stream)) return false;
  }
  return true;
}

bool TorchWork::wait(std::chrono::milliseconds timeout) {
  if (streamWait()) return true;  // the caller's stream waits; the host does not
  const bool limited = timeout > std::chrono::milliseconds(0);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  EngineWorks engine;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!completed_) engine = engine_;
  }
  for (auto& w : engine) {
    double left = -1;
    if (limited) left = std::max(0.0, std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count());
    bool finished;
    try {
      InlineScope runs(!limited);  // a wait without a limit may run its call itself
      finished = comm_->waitDriving(w, left);
    } catch (...) {
      break;  // it failed: settle() carries the error
    }
    if (!finished) {
      C10_THROW_ERROR(DistBackendError, c10::str("pycollect backend: ", method_, " not completed within ",
                                                 timeout.count(), " ms of Work.wait(timeout); it is still running"));
    }
  }
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return completed_; });  // the settling thread is finishing it
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void TorchWork::completeFuture(c10::ivalue::Future& future) {
  if (futureError_) {
    future.setError(futureError_);
  } else {
    future.markCompleted(c10::IValue(outputs_));
  }
}

c10::intrusive_ptr<c10::ivalue::Future> TorchWork::getFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  bool complete = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!future_) {
      future_ = makeFuture(cudaDevices(outputs_));
      complete = outcomeKnown_;  // settled before anyone asked: completed here, once
    }
    future = future_;
  }
  if (complete) completeFuture(*future);
  return future;
}

}  // namespace pycollect::torchb
