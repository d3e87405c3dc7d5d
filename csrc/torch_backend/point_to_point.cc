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

Backend::Receiving Backend::receiving(OpType type, const char* method, std::vector<at::Tensor>& tensors) {
  at::Tensor& t = single(tensors, method);
  Receiving r{make(type, method, {t}), t, check(t, method, "tensor")};
  if (t.is_cuda()) {
    std::vector<std::pair<at::Tensor, at::Tensor>> back;
    r.data = hostOutput(t, back);
    copyBackWhenDone(r.work, std::move(back));
  }
  return r;
}

WorkPtr Backend::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  Receiving r = receiving(OpType::RECV, "recv", tensors);
  r.work->setSource(srcRank);
  return run(r.work, false, [&](TorchWork& w) {
    w.keep(r.data);
    w.add(comm_->recv(r.data.data_ptr(), r.buffer.count, r.buffer.dtype, srcRank, tag));
  });
}

WorkPtr Backend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  Receiving r = receiving(OpType::RECVANYSOURCE, "recvAnysource", tensors);
  return run(r.work, false, [&](TorchWork& w) {
    w.keep(r.data);
    // The engine writes the sender's rank into the Work before it completes.
    w.add(comm_->recvAny(r.data.data_ptr(), r.buffer.count, r.buffer.dtype, tag, w.sourceSlot()));
  });
}

}  // namespace pycollect::torchb
