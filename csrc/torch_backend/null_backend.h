// A torch.distributed backend that moves nothing: every call returns a Work already
// settled (the same TorchWork the "pycollect" backend returns), results not computed.
// bench/p2p.py times calls on it beside "pycollect" and Gloo: the floor of a call
// through torch, torch's own dispatch and nothing else. Never registered outside the
// benchmarks (bench/null_backend.py registers it as "null").
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace pycollect::torchb {

class NullBackend : public c10d::Backend {
 public:
  NullBackend(int rank, int size) : c10d::Backend(rank, size) {}
  const std::string getBackendName() const override { return "null"; }
  using WorkPtr = c10::intrusive_ptr<c10d::Work>;
  WorkPtr allreduce(std::vector<at::Tensor>& t, const c10d::AllreduceOptions&) override;
  WorkPtr broadcast(std::vector<at::Tensor>& t, const c10d::BroadcastOptions&) override;
  WorkPtr reduce(std::vector<at::Tensor>& t, const c10d::ReduceOptions&) override;
  WorkPtr barrier(const c10d::BarrierOptions&) override;
  WorkPtr _allgather_base(at::Tensor& out, at::Tensor& in, const c10d::AllgatherOptions&) override;
  WorkPtr allgather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                    const c10d::AllgatherOptions&) override;
  WorkPtr reduce_scatter(std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>& in,
                         const c10d::ReduceScatterOptions&) override;
  WorkPtr _reduce_scatter_base(at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions&) override;
  WorkPtr gather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                 const c10d::GatherOptions&) override;
  WorkPtr scatter(std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>& in,
                  const c10d::ScatterOptions&) override;
  WorkPtr alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& outSplits,
                        std::vector<int64_t>& inSplits, const c10d::AllToAllOptions&) override;
  WorkPtr send(std::vector<at::Tensor>& t, int dst, int tag) override;
  WorkPtr recv(std::vector<at::Tensor>& t, int src, int tag) override;
  WorkPtr recvAnysource(std::vector<at::Tensor>& t, int tag) override;
};

}  // namespace pycollect::torchb
