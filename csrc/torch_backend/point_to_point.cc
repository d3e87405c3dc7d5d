// Sends and receives. Each is posted on the engine at once (or queued behind the group's
// earlier calls) and never waits for its peer: torch waits on the Work when the caller
// asked to block (dist.send, dist.recv), and a batch (batch_isend_irecv, between
// startCoalescing and endCoalescing) is all posted before anyone waits. CUDA tensors go
// through host memory: a send's copy is taken now, a recv's result copied back when it
// arrives.
#include "torch_backend/backend.h"

namespace pycollect::torchb {

WorkPtr Backend::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  at::Tensor& t = single(tensors, "send");
  const Buffer b = check(t, "send", "tensor");
  at::Tensor data = t.is_cuda() ? hostInput(t) : t;
  return run(make(OpType::SEND, "send", {t}), false, [&](TorchWork& w) {
    w.keep(data);
    w.add(comm_->send(data.data_ptr(), b.count, b.dtype, dstRank, tag));
  });
}

WorkPtr Backend::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  at::Tensor& t = single(tensors, "recv");
  const Buffer b = check(t, "recv", "tensor");
  auto work = make(OpType::RECV, "recv", {t});
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  at::Tensor data = t.is_cuda() ? hostOutput(work, t, back) : t;
  copyBackWhenDone(work, std::move(back));
  work->setSource(srcRank);
  return run(work, false, [&](TorchWork& w) {
    w.keep(data);
    w.add(comm_->recv(data.data_ptr(), b.count, b.dtype, srcRank, tag));
  });
}

WorkPtr Backend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  at::Tensor& t = single(tensors, "recvAnysource");
  const Buffer b = check(t, "recvAnysource", "tensor");
  auto work = make(OpType::RECVANYSOURCE, "recvAnysource", {t});
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  at::Tensor data = t.is_cuda() ? hostOutput(work, t, back) : t;
  copyBackWhenDone(work, std::move(back));
  return run(work, false, [&](TorchWork& w) {
    w.keep(data);
    // The engine writes the sender's rank into the Work before it completes.
    w.add(comm_->recvAny(data.data_ptr(), b.count, b.dtype, tag, w.sourceSlot()));
  });
}

}  // namespace pycollect::torchb
