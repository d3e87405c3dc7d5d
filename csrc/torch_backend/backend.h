// pycollect as a torch.distributed backend: a c10d::Backend whose calls run on one
// pycollect engine group (comm/communicator.h), registered as "pycollect" for CPU and
// CUDA tensors (pycollect/torch_backend/__init__.py).
//
// Python forms the group (pycollect.formation: rendezvous on torch's store, HMAC, topology,
// the cost model's tables) and hands its Communicator over; from then on no Python runs
// on a call. Each call checks its tensors (torch_backend/tensors.h), issues its engine
// operations and returns a TorchWork (torch_backend/work.h) that the engine completes.
//
// torch's contract: an asynchronous call (opts.asyncOp, and every send and recv) is
// queued, or posted when the links are free, and never waits for a peer; a blocking
// call (async_op=False: torch waits at once) runs on the caller's thread when nothing is
// queued ahead of it (InlineScope). Each group has its own engine worker, so point-to-
// point calls and collectives of several groups make progress independently.
//
// CUDA tensors: all-reduce, broadcast, reduce and the flat all-gather and reduce-scatter
// are staged through pinned host memory by the engine, ordered after the caller's
// current stream, and wait() orders the stream after them (no host wait). The other
// calls copy CUDA inputs to host memory first and copy results back when they complete.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <Python.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <c10/util/Exception.h>

#include "comm/communicator.h"
#include "common/error.h"
#include "torch_backend/tensors.h"
#include "torch_backend/work.h"

namespace pycollect::torchb {

using c10d::OpType;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// Whether Python can still take a call or a reference (not during interpreter teardown).
bool pythonAlive();

class Backend : public c10d::Backend {
 public:
  struct Settings {
    std::chrono::milliseconds timeout{1800 * 1000};
    bool blockingWait = false;  // PYCOLLECT_BLOCKING_WAIT: wait() blocks the host on CUDA calls too
  };
  Backend(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::shared_ptr<Communicator> comm,
          Settings settings, PyObject* onShutdown);
  ~Backend() override;

  const std::string getBackendName() const override { return "pycollect"; }
  bool supportsCoalescing() const override { return true; }
  // dist.shrink_group: the survivors' new backend, made by `shrinker` (set by the Python side,
  // pycollect/torch_backend/native.py: the engine group shrunk, a Backend over it).
  using Shrinker = std::function<c10::intrusive_ptr<Backend>(const std::vector<int64_t>& excluded, int flags)>;
  void setShrinker(Shrinker shrinker) { shrinker_ = std::move(shrinker); }
  bool supportsShrinking() const override { return static_cast<bool>(shrinker_); }
  // ProcessGroup::splitGroup (dist.split_group, pg.split_group): the child's backend over
  // `ranks` (ranks of this group), formed on torch's `store` for it by `splitter` (set by the
  // Python side, native.py). torch asks once per device of the group: one child serves all.
  using Splitter = std::function<c10::intrusive_ptr<Backend>(const c10::intrusive_ptr<c10d::Store>& store,
                                                             const std::vector<int>& ranks, double timeoutSec)>;
  void setSplitter(Splitter splitter) { splitter_ = std::move(splitter); }
  bool supportsSplitting() const override { return static_cast<bool>(splitter_); }
  // What torch's splitGroup hands a child by default: the group's timeout.
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override {
    return c10::make_intrusive<c10d::Backend::Options>("pycollect", settings_.timeout);
  }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
                                           const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride) override;
  void startCoalescing() override;
  WorkPtr endCoalescing() override;

  WorkPtr broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  WorkPtr allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  WorkPtr allreduce_sparse(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  WorkPtr allreduce_coalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  WorkPtr reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  WorkPtr allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                    const c10d::AllgatherOptions& opts) override;
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override;
  WorkPtr allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                              const c10d::AllgatherOptions& opts) override;
  WorkPtr allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllgatherOptions& opts) override;
  WorkPtr gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                 const c10d::GatherOptions& opts) override;
  WorkPtr scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                  const c10d::ScatterOptions& opts) override;
  WorkPtr reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                         const c10d::ReduceScatterOptions& opts) override;
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  WorkPtr reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::ReduceScatterOptions& opts) override;
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                        std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) override;
  WorkPtr alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                   const c10d::AllToAllOptions& opts) override;
  WorkPtr send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  WorkPtr recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  WorkPtr recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  WorkPtr barrier(const c10d::BarrierOptions& opts) override;
  // Gloo's monitored barrier, met in the group's store (so a rank that never arrives is
  // named, and the links stay usable): rank 0 waits for each rank, then releases them.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;
  // The calls issued on the group so far (Backend::run), the same on every rank.
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
  // The group's timeout for the calls that start from now on (ProcessGroup.set_timeout).
  void setTimeout(std::chrono::milliseconds timeout) override;
  void abort() override;
  void shutdown() override;

  const std::shared_ptr<Communicator>& communicator() const { return comm_; }

 private:
  // A new Work for a call of `method`, yielding `outputs`.
  c10::intrusive_ptr<TorchWork> make(OpType type, const char* method, std::vector<at::Tensor> outputs);
  // Starts `work` (its engine operations were added); kept for endCoalescing if coalescing.
  WorkPtr launch(c10::intrusive_ptr<TorchWork> work);
  // Issues a call's engine operations (`issue` adds them to the Work), on this thread when
  // `blocking` and nothing is queued (InlineScope), then launches the Work. Every call
  // passes here once. Arguments the engine refuses raise ValueError here; an engine error
  // at issue (the group failed earlier, or was destroyed) is the Work's, as a failure while
  // running would be (DistBackendError).
  //
  // The group's sequence number counts the calls that got here, as Gloo's counts those
  // that passed its argument checks (tensors, sizes, ranks: ours come before this), whether
  // the op is then refused for the dtype (a bitwise op on floats), fails or runs.
  template <typename F>
  WorkPtr run(c10::intrusive_ptr<TorchWork> work, bool blocking, F&& issue) {
    ++seq_;
    try {
      InlineScope runs(blocking && !coalescing_);
      issue(*work);
    } catch (const InvalidArgument& e) {
      C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", work->method(), ": ", e.what()));
    } catch (const c10::Error&) {
      throw;
    } catch (const std::exception&) {
      work->addFailed(std::current_exception());
    }
    return launch(std::move(work));
  }
  // Whether host memory is staged as device memory (the engine's host device, in tests).
  bool hostStaged() const;
  // For a staged call: the device of `b` (-1 for the host device) and its DeviceCall.
  DeviceCall deviceCall(const Buffer& b, const char* method);
  // CUDA tensors of the calls without a staged form: host copies in, results copied back
  // when the call completes (the Work's finish step; `back` pairs each tensor with its copy).
  at::Tensor hostInput(const at::Tensor& t);
  at::Tensor hostOutput(const at::Tensor& t, std::vector<std::pair<at::Tensor, at::Tensor>>& back);
  // Where the engine reads `tensors`: their memory, or their host copies (`cuda`); `work`
  // keeps what it reads until it completes.
  std::vector<Span> hostInputSpans(TorchWork& work, const std::vector<at::Tensor>& tensors, bool cuda);
  // Where the engine writes `tensors`, outputs of the Work (which holds them): their memory,
  // or host copies (`cuda`) held by `back` and copied back.
  std::vector<Span> hostOutputSpans(const std::vector<at::Tensor>& tensors, bool cuda,
                                    std::vector<std::pair<at::Tensor, at::Tensor>>& back);
  // `rootRank` as a rank of the group, checked (ValueError naming `method`).
  int rootOf(int64_t rootRank, const char* method) const;
  // The one list of a per-rank list argument (`lists[0]`): a tensor per rank of the group,
  // each checked, all of `like`'s dtype. `copiedInto`: the call only copies into them
  // (checkKind: any strides).
  const std::vector<at::Tensor>& groupList(std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like,
                                           const char* method, const char* what, bool copiedInto = false);
  // One flat all-gather / reduce-scatter into `w`: staged when `out` is device memory (or the
  // tests' host device), else on host memory.
  void addAllGather(TorchWork& w, const Buffer& in, const Buffer& out, const char* method);
  void addReduceScatter(TorchWork& w, const Buffer& in, const Buffer& out, ReduceOp op, const char* method);
  // A call's input and output lists where the engine reads and writes them (the outputs
  // are the Work's): the tensors, or for CUDA tensors host copies (outputs copied back when
  // the Work completes).
  struct HostSpans {
    std::vector<Span> ins, outs;
  };
  HostSpans hostSpans(c10::intrusive_ptr<TorchWork>& work, const std::vector<at::Tensor>& inputs,
                      const std::vector<at::Tensor>& outputs, const char* method);
  // A receive's Work and where its bytes land: the tensor, or for a CUDA tensor a host copy
  // that is copied back when the Work completes.
  struct Receiving {
    c10::intrusive_ptr<TorchWork> work;
    at::Tensor data;
    Buffer buffer;
  };
  Receiving receiving(OpType type, const char* method, std::vector<at::Tensor>& tensors);
  void copyBackWhenDone(c10::intrusive_ptr<TorchWork>& work, std::vector<std::pair<at::Tensor, at::Tensor>> back);
  double timeoutSec(std::chrono::milliseconds t) const;
  void release();  // runs the shutdown callback once

  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<Communicator> comm_;
  Shrinker shrinker_;
  Splitter splitter_;
  // The last split's child, with the store and ranks it was made for (torch asks per device).
  c10::intrusive_ptr<c10d::Store> splitStore_;
  std::vector<int> splitRanks_;
  c10::intrusive_ptr<Backend> splitChild_;
  Settings settings_;
  PyObject* onShutdown_;  // Python: forget the engine group (pycollect.api); owned reference
  int cudaDevice_ = -1;   // the device of the group's CUDA calls (its first one's)
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<TorchWork>> coalesced_;
  std::atomic<uint64_t> seq_{0};  // calls issued (the group's sequence number); any thread
  uint64_t monitored_ = 0;  // monitored barriers so far (each meets under its own keys)
};

}  // namespace pycollect::torchb
