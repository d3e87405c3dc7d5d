// The torch Work of one backend call: the engine operations it issued (in order) and the
// tensors its Future yields.
//
// Completion comes from the engine itself: each engine Work runs a hook when it finishes
// (comm/work.h, whenDone), on the thread that finished it; the last one settles this Work
// there: it runs the call's finish step if any (copying a flat result into a list, or host
// copies back into CUDA tensors), completes torch's Future if anyone asked for it yet (its
// callbacks, DDP's or a comm hook's, run on that thread; one asked for later is made
// complete), and then marks the Work complete, so that a wait() that
// returns has seen the callbacks run (Gloo's order). A callback may issue further calls
// on the same group and wait for them (PowerSGD does): the engine runs such calls where
// they are issued (worker.cc, [Note: calls from a completion]). No thread stands between
// the engine and torch.
//
// That thread may be the caller's, the engine's worker or another thread waiting on the
// group: never assume which. So the finish step runs under the caller's thread-local state
// (grad mode, inference mode, dispatch keys: at::ThreadLocalState), taken when the call was
// made, as torch's own backends carry it into their completion: an output list made under
// torch.inference_mode() or no_grad() is written as the caller could have written it.
//
// The Work records "pycollect:<call>" in torch's profiler from the call until it completes
// (c10d::Work's profiling title), beside the c10d::<call> event of the issuing, as Gloo's
// "gloo:<call>".
//
// wait() drives the links itself while it waits (Communicator::waitDriving), so a blocking
// wait ends when the bytes arrive. For CUDA tensors staged through pinned memory, wait()
// makes the caller's current stream wait for the result and returns at once (no host
// wait), as NCCL's does, unless PYCOLLECT_BLOCKING_WAIT is set.
#pragma once

#include <ATen/ATen.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/work.h"

namespace pycollect::torchb {

class TorchWork : public c10d::Work {
 public:
  // `profilingTitle`: the profiler's name for it (a literal, or nullptr for none).
  TorchWork(int rank, c10d::OpType type, const char* method, std::vector<at::Tensor> outputs,
            std::shared_ptr<Communicator> comm, bool blockingWait, const char* profilingTitle = nullptr);
  ~TorchWork() override;

  // Building the Work (before start): the engine operations, in issue order; tensors to
  // keep alive until it completes; finish steps, run in the order added once every engine
  // operation succeeded, under the caller's thread-local state, before the Work completes.
  void add(std::shared_ptr<pycollect::Work> work) { engine_.push_back(std::move(work)); }
  // The call failed before the engine ran it (`error`): an engine operation already ended
  // with it, which settles the Work as any other failure does.
  void addFailed(std::exception_ptr error);
  void keep(at::Tensor t) { keep_.push_back(std::move(t)); }
  void addFinish(std::function<void()> fn) {
    if (!tls_) tls_.emplace();  // the caller's (a step is added as the call is made); only for a Work with one
    finish_.push_back(std::move(fn));
  }
  // Staged (device) calls: the device whose stream the caller's wait() may order (-1: the
  // engine's host device in tests, whose stream is 0).
  void setStaged(int device) { staged_ = true; device_ = device; }
  const char* method() const { return method_; }
  // A recv from any source: where the engine writes the sender's rank.
  int32_t* sourceSlot() { return &source_; }
  void setSource(int rank) { source_ = rank; }
  // Hooks each engine operation; the last to finish settles this Work (maybe right here).
  static c10::intrusive_ptr<TorchWork> start(c10::intrusive_ptr<TorchWork> self);
  // A Work whose call already failed or did nothing: settled at once.
  static c10::intrusive_ptr<TorchWork> done(int rank, c10d::OpType type, const char* method,
                                            std::vector<at::Tensor> outputs, std::exception_ptr error = nullptr);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  void engineDone();  // one engine operation finished
  void settle();      // all did: finish step, complete, Future
  // Makes the caller's stream wait for every staged operation; false: the host must wait.
  bool streamWait();

  const char* method_;
  std::vector<at::Tensor> outputs_;
  // Inline for a call's usual few (no allocation per call on the small calls' path).
  c10::SmallVector<at::Tensor, 2> keep_;
  std::shared_ptr<Communicator> comm_;
  bool blockingWait_;
  using EngineWorks = c10::SmallVector<std::shared_ptr<pycollect::Work>, 1>;
  EngineWorks engine_;
  std::vector<std::function<void()>> finish_;
  std::atomic<size_t> pending_{0};
  bool staged_ = false;
  int device_ = -1;
  int32_t source_ = -1;
  // torch's Future of the call, made when first asked (getFuture: DDP's hooks, async
  // callers that chain on it); a blocking call nobody asks it of makes none. Made with the
  // Work where an output is CUDA memory, and at settling for a staged call, so that it
  // completes on the settling thread, whose stream holds the result (settle).
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // under mutex_
  bool outcomeKnown_ = false;                        // under mutex_: settle() set futureError_
  std::exception_ptr futureError_;
  void completeFuture(c10::ivalue::Future& future);  // with futureError_ or the outputs
  std::optional<at::ThreadLocalState> tls_;  // the calling thread's, taken with the first finish step
};

// An engine error as torch's exception type, with the engine's message (which names the
// rank): DistBackendError for every failure of the group, a timeout's saying "Timed out"
// as Gloo's does.
std::exception_ptr torchError(const char* method, std::exception_ptr error);

}  // namespace pycollect::torchb
