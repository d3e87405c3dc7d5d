// Sparse all-reduce (SUM), as Gloo offers it: every rank's COO indices and values are
// all-gathered on the engine and the sum is formed locally, in rank order, so every rank
// holds the same result. The ranks all-gather their non-zero counts, then their indices
// and values padded to the largest count (the engine's all-gather moves equal sizes).
// The tensor gets the (coalesced) result in place, as with Gloo. It runs before the call
// returns (three all-gathers, each waited on), and its Work is already settled.
#include "torch_backend/backend.h"

namespace pycollect::torchb {

namespace {

// All-gathers `in` (contiguous, host) into a new tensor of `size` x in's shape, waiting.
at::Tensor gathered(Communicator& comm, const at::Tensor& in, int size) {
  std::vector<int64_t> shape{size};
  for (int64_t d : in.sizes()) shape.push_back(d);
  at::Tensor out = at::empty(shape, in.options());
  const Buffer b = check(in, "allreduce_sparse", "tensor");
  InlineScope runs(true);
  auto work = comm.allGather(in.data_ptr(), out.data_ptr(), b.count, b.dtype, Algo::kAuto);
  comm.waitDriving(work, -1);  // rethrows the engine's error
  return out;
}

}  // namespace

WorkPtr Backend::allreduce_sparse(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  at::Tensor& tensor = single(tensors, "allreduce_sparse");
  const Reduction r = reduction(opts.reduceOp, "allreduce");
  if (r.op != ReduceOp::kSum || r.premul()) {
    C10_THROW_ERROR(ValueError, "pycollect backend: sparse allreduce supports SUM only");
  }
  if (tensor.is_cuda()) C10_THROW_ERROR(NotImplementedError, "pycollect backend: sparse allreduce of CUDA tensors");
  seq_ += 3;
  try {
    at::Tensor local = tensor.coalesce();
    at::Tensor indices = local._indices().contiguous();
    at::Tensor values = local._values().contiguous();
    at::Tensor counts = gathered(*comm_, at::full({1}, indices.size(1), at::kLong), size_);
    const int64_t width = counts.max().item<int64_t>();
    at::Tensor padIdx = at::zeros({indices.size(0), width}, at::kLong);
    padIdx.narrow(1, 0, indices.size(1)).copy_(indices);
    std::vector<int64_t> valShape{width};
    for (int64_t d = 1; d < values.dim(); ++d) valShape.push_back(values.size(d));
    at::Tensor padVal = at::zeros(valShape, values.options());
    padVal.narrow(0, 0, values.size(0)).copy_(values);
    at::Tensor allIdx = gathered(*comm_, padIdx, size_);
    at::Tensor allVal = gathered(*comm_, padVal, size_);
    at::Tensor total;
    for (int r = 0; r < size_; ++r) {
      const int64_t k = counts[r].item<int64_t>();
      at::Tensor part = at::sparse_coo_tensor(allIdx[r].narrow(1, 0, k), allVal[r].narrow(0, 0, k), local.sizes());
      total = total.defined() ? total + part : part;
    }
    tensor.copy_(total.coalesce());
  } catch (const c10::Error&) {
    throw;
  } catch (const InvalidArgument& e) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: allreduce_sparse: ", e.what()));
  } catch (const std::exception&) {
    return TorchWork::done(rank_, OpType::_ALLREDUCE_SPARSE, "allreduce_sparse", {tensor}, std::current_exception());
  }
  return TorchWork::done(rank_, OpType::_ALLREDUCE_SPARSE, "allreduce_sparse", {tensor});
}

}  // namespace pycollect::torchb
