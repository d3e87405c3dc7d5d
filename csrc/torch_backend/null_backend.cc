#include "torch_backend/null_backend.h"

#include "torch_backend/work.h"

namespace pycollect::torchb {

namespace {

c10::intrusive_ptr<c10d::Work> done(int rank, c10d::OpType type, std::vector<at::Tensor> out, int source = -1) {
  auto w = TorchWork::done(rank, type, "null", std::move(out));
  w->setSource(source);
  return w;
}

}  // namespace

using WorkPtr = NullBackend::WorkPtr;
WorkPtr NullBackend::allreduce(std::vector<at::Tensor>& t, const c10d::AllreduceOptions&) {
  return done(rank_, c10d::OpType::ALLREDUCE, t);
}
WorkPtr NullBackend::broadcast(std::vector<at::Tensor>& t, const c10d::BroadcastOptions&) {
  return done(rank_, c10d::OpType::BROADCAST, t);
}
WorkPtr NullBackend::reduce(std::vector<at::Tensor>& t, const c10d::ReduceOptions&) {
  return done(rank_, c10d::OpType::REDUCE, t);
}
WorkPtr NullBackend::barrier(const c10d::BarrierOptions&) { return done(rank_, c10d::OpType::BARRIER, {}); }
WorkPtr NullBackend::_allgather_base(at::Tensor& out, at::Tensor&, const c10d::AllgatherOptions&) {
  return done(rank_, c10d::OpType::_ALLGATHER_BASE, {out});
}
WorkPtr NullBackend::allgather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>&,
                               const c10d::AllgatherOptions&) {
  return done(rank_, c10d::OpType::ALLGATHER, out.empty() ? std::vector<at::Tensor>() : out[0]);
}
WorkPtr NullBackend::reduce_scatter(std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>&,
                                    const c10d::ReduceScatterOptions&) {
  return done(rank_, c10d::OpType::REDUCE_SCATTER, out);
}
WorkPtr NullBackend::_reduce_scatter_base(at::Tensor& out, at::Tensor&, const c10d::ReduceScatterOptions&) {
  return done(rank_, c10d::OpType::_REDUCE_SCATTER_BASE, {out});
}
WorkPtr NullBackend::gather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>&,
                            const c10d::GatherOptions&) {
  std::vector<at::Tensor> flat;
  for (auto& row : out) flat.insert(flat.end(), row.begin(), row.end());
  return done(rank_, c10d::OpType::GATHER, flat);
}
WorkPtr NullBackend::scatter(std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>&,
                             const c10d::ScatterOptions&) {
  return done(rank_, c10d::OpType::SCATTER, out);
}
WorkPtr NullBackend::alltoall_base(at::Tensor& out, at::Tensor&, std::vector<int64_t>&, std::vector<int64_t>&,
                                   const c10d::AllToAllOptions&) {
  return done(rank_, c10d::OpType::ALLTOALL_BASE, {out});
}
WorkPtr NullBackend::send(std::vector<at::Tensor>& t, int, int) { return done(rank_, c10d::OpType::SEND, t); }
WorkPtr NullBackend::recv(std::vector<at::Tensor>& t, int src, int) {
  return done(rank_, c10d::OpType::RECV, t, src);
}
WorkPtr NullBackend::recvAnysource(std::vector<at::Tensor>& t, int) {
  return done(rank_, c10d::OpType::RECVANYSOURCE, t, 1 - rank_);  // two ranks: the other one
}

}  // namespace pycollect::torchb
