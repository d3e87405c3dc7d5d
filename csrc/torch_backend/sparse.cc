// Sparse all-reduce (SUM), as Gloo offers it: every rank's COO indices and values are
// all-gathered on the engine and the sum is formed locally, in rank order, so every rank
// holds the same result; the tensor gets it (coalesced) in place, as with Gloo.
//
// Asynchronous like every other call: it issues two engine calls when it is made, each an
// all-gather whose count differs by rank (Communicator::allGatherVaried: the ranks' counts,
// then their elements, in one queued call), the indices' and then the values'. Neither
// waits for a peer at the call, and both are issued in the caller's order, as any call is.
// The sum is the Work's finish step, once both have arrived.
#include "torch_backend/backend.h"

namespace pycollect::torchb {

namespace {

// Rank r's part of `gathered` (counts in elements of `like`'s dtype), as a tensor of
// `rows` rows shaped as `like`'s rows, starting `offset` elements in.
at::Tensor partOf(const Communicator::VariedGather& gathered, size_t offset, int64_t rows, const at::Tensor& like) {
  std::vector<int64_t> shape{rows};
  for (int64_t d = 1; d < like.dim(); ++d) shape.push_back(like.size(d));
  auto* base = const_cast<char*>(gathered.data.data()) + offset * like.element_size();
  return at::from_blob(base, shape, like.options());
}

// Rank order's sum of every rank's (indices, values) into `tensor` (the finish step).
void sumInto(at::Tensor& tensor, const Communicator::VariedGather& indices, const Communicator::VariedGather& values,
             const at::Tensor& localIndices, const at::Tensor& localValues) {
  const int64_t sparseDims = localIndices.size(0);
  const int64_t rowElems = localValues.numel() / std::max<int64_t>(1, localValues.size(0));
  at::Tensor total;
  size_t atIndex = 0, atValue = 0;
  for (size_t r = 0; r < indices.counts.size(); ++r) {
    const int64_t nnz = sparseDims > 0 ? static_cast<int64_t>(indices.counts[r]) / sparseDims
                                       : static_cast<int64_t>(values.counts[r]) / std::max<int64_t>(1, rowElems);
    // Each rank's indices are a [sparseDims, nnz] block of their own.
    at::Tensor idx = at::from_blob(const_cast<char*>(indices.data.data()) + atIndex * sizeof(int64_t),
                                   {sparseDims, nnz}, localIndices.options());
    at::Tensor part = at::sparse_coo_tensor(idx, partOf(values, atValue, nnz, localValues), tensor.sizes());
    total = total.defined() ? total + part : part;
    atIndex += indices.counts[r];
    atValue += values.counts[r];
  }
  tensor.copy_(total.coalesce());
}

}  // namespace

WorkPtr Backend::allreduce_sparse(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const char* method = "allreduce_sparse";
  at::Tensor& tensor = single(tensors, method);
  const Reduction r = reduction(opts.reduceOp, "allreduce");
  if (r.op != ReduceOp::kSum || r.premul()) {
    C10_THROW_ERROR(ValueError, "pycollect backend: sparse allreduce supports SUM only");
  }
  if (tensor.is_cuda()) C10_THROW_ERROR(NotImplementedError, "pycollect backend: sparse allreduce of CUDA tensors");
  const at::Tensor local = tensor.coalesce();
  const at::Tensor indices = local._indices().contiguous();  // [sparse dims, nnz], int64
  const at::Tensor values = local._values().contiguous();    // [nnz, dense dims...]
  const Buffer i = check(indices, method, "indices");
  const Buffer v = check(values, method, "values");
  auto gatheredIndices = std::make_shared<Communicator::VariedGather>();
  auto gatheredValues = std::make_shared<Communicator::VariedGather>();
  auto work = make(OpType::_ALLREDUCE_SPARSE, method, {tensor});
  work->addFinish([tensor, gatheredIndices, gatheredValues, indices, values]() mutable {
    sumInto(tensor, *gatheredIndices, *gatheredValues, indices, values);
  });
  return run(work, !opts.asyncOp, [&](TorchWork& w) {
    w.keep(indices);
    w.keep(values);
    w.add(comm_->allGatherVaried(i.data, i.count, i.dtype, gatheredIndices));
    w.add(comm_->allGatherVaried(v.data, v.count, v.dtype, gatheredValues));
  });
}

}  // namespace pycollect::torchb
