// The backend's collectives: each checks its tensors, then issues one engine operation
// (a few for the coalesced forms) through Backend::run. Ranks (`rootRank`) are ranks in
// the group, as torch passes them.
#include <c10/core/DeviceGuard.h>

#include "torch_backend/backend.h"

namespace pycollect::torchb {

namespace {

// Whether every tensor of a call (`first` and `second`) lives in host memory, or every one
// on a CUDA device.
bool onCuda(const char* method, c10::ArrayRef<at::Tensor> first, c10::ArrayRef<at::Tensor> second = {}) {
  bool cuda = false, host = false;
  for (auto list : {first, second}) {
    for (const auto& t : list) (t.is_cuda() ? cuda : host) = true;
  }
  if (cuda && host) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method,
                                         ": CPU and CUDA tensors are mixed in one call; move them to one device"));
  }
  return cuda;
}

Span spanOf(const at::Tensor& t) { return Span{static_cast<char*>(t.data_ptr()), static_cast<size_t>(t.numel())}; }

bool contiguous(const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) {
    if (!t.is_contiguous()) return false;
  }
  return true;
}

// A root's list argument on the other ranks.
const std::vector<at::Tensor> kNoTensors;

// `flat`'s consecutive ranges copied into `outs` (the list forms' finish step).
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& outs) {
  int64_t offset = 0;
  for (const auto& o : outs) {
    c10::OptionalDeviceGuard guard;
    if (o.is_cuda()) guard.reset_device(o.device());
    o.copy_(flat.narrow(0, offset, o.numel()).view(o.sizes()));
    offset += o.numel();
  }
}

}  // namespace

int Backend::rootOf(int64_t rootRank, const char* method) const {
  if (rootRank < 0 || rootRank >= size_) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, ": root rank ", rootRank,
                                         " is outside the group [0, ", size_, ")"));
  }
  return static_cast<int>(rootRank);
}

const std::vector<at::Tensor>& Backend::groupList(std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like,
                                                  const char* method, const char* what, bool copiedInto) {
  checkOneList(lists.size(), method, what);
  const std::vector<at::Tensor>& list = lists[0];
  if (static_cast<int>(list.size()) != size_) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, "(", what, "): list has ", list.size(),
                                         " entries, the group has ", size_, " ranks"));
  }
  for (const auto& t : list) copiedInto ? (void)checkKind(t, method, what) : (void)check(t, method, what);
  checkSameDType(list, like, method);
  return list;
}

std::vector<Span> Backend::hostInputSpans(TorchWork& work, const std::vector<at::Tensor>& tensors, bool cuda) {
  std::vector<Span> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) {
    at::Tensor read = cuda ? hostInput(t) : t;
    out.push_back(spanOf(read));
    work.keep(std::move(read));
  }
  return out;
}

std::vector<Span> Backend::hostOutputSpans(const std::vector<at::Tensor>& tensors, bool cuda,
                                           std::vector<std::pair<at::Tensor, at::Tensor>>& back) {
  std::vector<Span> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(spanOf(cuda ? hostOutput(t, back) : t));
  return out;
}

Backend::HostSpans Backend::hostSpans(c10::intrusive_ptr<TorchWork>& work, const std::vector<at::Tensor>& inputs,
                                      const std::vector<at::Tensor>& outputs, const char* method) {
  const bool cuda = onCuda(method, inputs, outputs);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  HostSpans spans{hostInputSpans(*work, inputs, cuda), hostOutputSpans(outputs, cuda, back)};
  copyBackWhenDone(work, std::move(back));
  return spans;
}

void Backend::addAllGather(TorchWork& w, const Buffer& in, const Buffer& out, const char* method) {
  if (out.device >= 0 || hostStaged()) {
    w.setStaged(out.device);
    w.add(comm_->allGatherStaged(in.data, out.data, in.count, in.dtype, Algo::kAuto, deviceCall(out, method)));
  } else {
    w.add(comm_->allGather(in.data, out.data, in.count, in.dtype, Algo::kAuto));
  }
}

void Backend::addReduceScatter(TorchWork& w, const Buffer& in, const Buffer& out, ReduceOp op, const char* method) {
  if (out.device >= 0 || hostStaged()) {
    w.setStaged(out.device);
    w.add(comm_->reduceScatterStaged(in.data, out.data, out.count, out.dtype, op, Algo::kAuto, deviceCall(out, method)));
  } else {
    w.add(comm_->reduceScatter(in.data, out.data, out.count, out.dtype, op, Algo::kAuto));
  }
}

WorkPtr Backend::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  at::Tensor& t = single(tensors, "allreduce");
  if (t.is_sparse()) return allreduce_sparse(tensors, opts);
  const Buffer b = check(t, "allreduce", "tensor");
  const Reduction r = reduction(opts.reduceOp, "allreduce");
  if (r.premul()) premultiply(r, t, true, "allreduce");
  return run(make(OpType::ALLREDUCE, "allreduce", {t}), !opts.asyncOp, [&](TorchWork& w) {
    if (b.device >= 0 || hostStaged()) {
      w.setStaged(b.device);
      w.add(comm_->allReduceStaged(b.data, b.count, b.dtype, r.op, Algo::kAuto, deviceCall(b, "allreduce")));
    } else {
      w.add(comm_->allReduce(b.data, b.count, b.dtype, r.op, Algo::kAuto));
    }
  });
}

WorkPtr Backend::allreduce_coalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const char* method = "allreduce_coalesced";
  std::vector<Buffer> bufs;
  for (const auto& t : tensors) bufs.push_back(check(t, method, "tensors"));
  const Reduction r = reduction(opts.reduceOp, method);
  const bool cuda = onCuda(method, tensors);
  for (auto& t : tensors) {
    if (r.premul()) premultiply(r, t, true, method);
  }
  auto work = make(OpType::ALLREDUCE_COALESCED, method, tensors);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  const std::vector<Span> host = hostOutputSpans(tensors, cuda, back);
  copyBackWhenDone(work, std::move(back));
  // One engine call (one header, one pass) per dtype among the tensors.
  return run(work, !opts.asyncOp, [&](TorchWork& w) {
    std::vector<bool> taken(host.size(), false);
    for (size_t i = 0; i < host.size(); ++i) {
      if (taken[i]) continue;
      std::vector<Span> same;
      for (size_t j = i; j < host.size(); ++j) {
        if (!taken[j] && bufs[j].dtype == bufs[i].dtype) {
          taken[j] = true;
          same.push_back(host[j]);
        }
      }
      w.add(comm_->allReduceCoalesced(std::move(same), bufs[i].dtype, r.op, Algo::kAuto));
    }
  });
}

WorkPtr Backend::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  at::Tensor& t = single(tensors, "broadcast");
  const Buffer b = check(t, "broadcast", "tensor");
  const int root = rootOf(opts.rootRank, "broadcast");
  return run(make(OpType::BROADCAST, "broadcast", {t}), !opts.asyncOp, [&](TorchWork& w) {
    if (b.device >= 0 || hostStaged()) {
      w.setStaged(b.device);
      w.add(comm_->broadcastStaged(b.data, b.count, b.dtype, root, Algo::kAuto, deviceCall(b, "broadcast")));
    } else {
      w.add(comm_->broadcast(b.data, b.count, b.dtype, root, Algo::kAuto));
    }
  });
}

WorkPtr Backend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  at::Tensor& t = single(tensors, "reduce");
  const Buffer b = check(t, "reduce", "tensor");
  const Reduction r = reduction(opts.reduceOp, "reduce");
  const int root = rootOf(opts.rootRank, "reduce");
  if (r.premul()) premultiply(r, t, true, "reduce");
  return run(make(OpType::REDUCE, "reduce", {t}), !opts.asyncOp, [&](TorchWork& w) {
    if (b.device >= 0 || hostStaged()) {
      w.setStaged(b.device);
      w.add(comm_->reduceStaged(b.data, b.count, b.dtype, r.op, root, deviceCall(b, "reduce")));
    } else {
      w.add(comm_->reduce(b.data, b.count, b.dtype, r.op, root));
    }
  });
}

WorkPtr Backend::_allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const char* method = "_allgather_base";
  const Buffer i = check(input, method, "input");
  const Buffer o = check(output, method, "output");
  checkSameDType({output}, input, method);
  checkNumel(output, input.numel() * size_, method, "output");
  onCuda(method, {input, output});
  return run(make(OpType::_ALLGATHER_BASE, method, {output}), !opts.asyncOp, [&](TorchWork& w) {
    w.keep(input);
    addAllGather(w, i, o, method);
  });
}

WorkPtr Backend::allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                           const c10d::AllgatherOptions& opts) {
  const char* method = "allgather";
  at::Tensor& input = single(inputs, method, "input_tensors");
  const Buffer i = check(input, method, "input");
  // Any strides (a view such as big.unbind(1)): the finish step copies into them.
  const std::vector<at::Tensor>& outs = groupList(outputs, input, method, "output_tensors", true);
  for (const auto& o : outs) checkNumel(o, input.numel(), method, "output_tensors");
  if (!onCuda(method, outs, input) && !hostStaged() && contiguous(outs)) {
    // Host tensors each in one piece: the engine writes every rank's part into its tensor
    // (the flat all-gather on the wire: collectives/list_forms.cc).
    std::vector<std::pair<at::Tensor, at::Tensor>> none;  // host tensors: nothing to copy back
    return run(make(OpType::ALLGATHER, method, outs), !opts.asyncOp, [&](TorchWork& w) {
      w.keep(input);
      w.add(comm_->allGatherList(spanOf(input), hostOutputSpans(outs, false, none), i.dtype, Algo::kAuto));
    });
  }
  // Gathered into one buffer, then copied into the list (the Work's finish step): on the
  // device for CUDA tensors (a staged all-gather), else in host memory.
  at::Tensor flat = at::empty({input.numel() * size_}, input.options());
  const Buffer f = check(flat, method, "output");
  auto work = make(OpType::ALLGATHER, method, outs);
  work->addFinish([flat, outs] { unflatten(flat, outs); });
  return run(work, !opts.asyncOp, [&](TorchWork& w) {
    w.keep(input);
    w.keep(flat);
    addAllGather(w, i, f, method);
  });
}

WorkPtr Backend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                     const c10d::AllgatherOptions& opts) {
  const char* method = "allgather_coalesced";
  if (static_cast<int>(outputs.size()) != size_) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, ": ", outputs.size(),
                                         " output lists, the group has ", size_, " ranks"));
  }
  if (inputs.empty()) C10_THROW_ERROR(ValueError, "pycollect backend: allgather_coalesced: no input tensors");
  std::vector<at::Tensor> all;
  for (const auto& t : inputs) check(t, method, "input_tensors");
  for (const auto& row : outputs) {
    if (row.size() != inputs.size()) {
      C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, ": an output list has ", row.size(),
                                           " tensors for ", inputs.size(), " inputs"));
    }
    for (size_t k = 0; k < row.size(); ++k) {
      check(row[k], method, "output_tensor_lists");
      checkNumel(row[k], inputs[k].numel(), method, "output_tensor_lists");
      all.push_back(row[k]);
    }
  }
  checkSameDType(inputs, inputs[0], method);
  checkSameDType(all, inputs[0], method);
  auto work = make(OpType::ALLGATHER_COALESCED, method, all);
  HostSpans host = hostSpans(work, inputs, all, method);
  const DType dtype = check(inputs[0], method, "input_tensors").dtype;
  return run(work, !opts.asyncOp, [&](TorchWork& w) {
    w.add(comm_->allGatherCoalesced(std::move(host.ins), std::move(host.outs), dtype, Algo::kAuto));
  });
}

WorkPtr Backend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                 const c10d::AllgatherOptions& opts) {
  const char* method = "allgather_into_tensor_coalesced";
  if (outputs.size() != inputs.size()) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, ": ", outputs.size(), " outputs for ",
                                         inputs.size(), " inputs"));
  }
  std::vector<Buffer> ins, outs;
  for (size_t k = 0; k < inputs.size(); ++k) {
    ins.push_back(check(inputs[k], method, "inputs"));
    outs.push_back(check(outputs[k], method, "outputs"));
    checkSameDType({outputs[k]}, inputs[k], method);
    checkNumel(outputs[k], inputs[k].numel() * size_, method, "outputs");
  }
  onCuda(method, outputs, inputs);
  return run(make(OpType::ALLGATHER_COALESCED, method, outputs), !opts.asyncOp, [&](TorchWork& w) {
    for (auto& t : inputs) w.keep(t);
    for (size_t k = 0; k < ins.size(); ++k) addAllGather(w, ins[k], outs[k], method);
  });
}

WorkPtr Backend::gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                        const c10d::GatherOptions& opts) {
  const char* method = "gather";
  at::Tensor& input = single(inputs, method, "input_tensors");
  const Buffer i = check(input, method, "input");
  const int root = rootOf(opts.rootRank, method);
  const std::vector<at::Tensor>& outs = rank_ == root ? groupList(outputs, input, method, "output_tensors")
                                                       : kNoTensors;
  const bool cuda = onCuda(method, outs, input);
  auto work = make(OpType::GATHER, method, outs);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  at::Tensor in = cuda ? hostInput(input) : input;
  std::vector<Span> hostOuts = hostOutputSpans(outs, cuda, back);
  copyBackWhenDone(work, std::move(back));
  return run(work, !opts.asyncOp, [&](TorchWork& w) {
    w.keep(in);
    w.add(comm_->gather(Span{static_cast<char*>(in.data_ptr()), i.count}, std::move(hostOuts), i.dtype, root));
  });
}

WorkPtr Backend::scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                         const c10d::ScatterOptions& opts) {
  const char* method = "scatter";
  at::Tensor& output = single(outputs, method, "output_tensors");
  const Buffer o = check(output, method, "output");
  const int root = rootOf(opts.rootRank, method);
  const std::vector<at::Tensor>& ins = rank_ == root ? groupList(inputs, output, method, "input_tensors")
                                                      : kNoTensors;
  const bool cuda = onCuda(method, ins, output);
  auto work = make(OpType::SCATTER, method, {output});
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  at::Tensor out = cuda ? hostOutput(output, back) : output;
  std::vector<Span> hostIns = hostInputSpans(*work, ins, cuda);
  copyBackWhenDone(work, std::move(back));
  return run(work, !opts.asyncOp, [&](TorchWork& w) {
    w.add(comm_->scatter(std::move(hostIns), Span{static_cast<char*>(out.data_ptr()), o.count}, o.dtype, root));
  });
}

WorkPtr Backend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const char* method = "_reduce_scatter_base";
  Buffer i = check(input, method, "input");
  const Buffer o = check(output, method, "output");
  checkSameDType({output}, input, method);
  checkNumel(input, output.numel() * size_, method, "input");
  onCuda(method, {input, output});
  const Reduction r = reduction(opts.reduceOp, method);
  at::Tensor in = input;
  if (r.premul()) {  // the caller's input stays as it was
    in = premultiply(r, input, false, method);
    i = check(in, method, "input");
  }
  return run(make(OpType::_REDUCE_SCATTER_BASE, method, {output}), !opts.asyncOp, [&](TorchWork& w) {
    w.keep(in);
    addReduceScatter(w, i, o, r.op, method);
  });
}

WorkPtr Backend::reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                const c10d::ReduceScatterOptions& opts) {
  const char* method = "reduce_scatter";
  at::Tensor& output = single(outputs, method, "output_tensors");
  const Buffer o = check(output, method, "output");
  const std::vector<at::Tensor>& ins = groupList(inputs, output, method, "input_tensors");
  checkNumel(ins[rank_], output.numel(), method, "input_tensors");  // this rank's own part
  bool even = true;
  for (const auto& t : ins) even = even && t.numel() == output.numel();
  const bool cuda = onCuda(method, ins, output);
  const Reduction r = reduction(opts.reduceOp, method);
  if (even && !cuda && !r.premul() && contiguous(ins)) {
    // Host tensors: the engine packs them into the flat call (collectives/list_forms.cc).
    return run(make(OpType::REDUCE_SCATTER, method, {output}), !opts.asyncOp, [&](TorchWork& w) {
      w.add(comm_->reduceScatterList(hostInputSpans(w, ins, false), spanOf(output), o.dtype, r.op, Algo::kAuto));
    });
  }
  // The list, one flat host buffer (PREMUL_SUM's factor applied there, not to the inputs).
  std::vector<at::Tensor> flats;
  for (const auto& t : ins) flats.push_back((cuda ? hostInput(t) : t).reshape({-1}));
  at::Tensor flat = at::cat(flats);
  if (r.premul()) premultiply(r, flat, true, method);
  auto work = make(OpType::REDUCE_SCATTER, method, {output});
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  at::Tensor out = cuda ? hostOutput(output, back) : output;
  copyBackWhenDone(work, std::move(back));
  if (even) {
    return run(work, !opts.asyncOp, [&](TorchWork& w) {
      w.keep(flat);
      w.keep(out);
      w.add(comm_->reduceScatter(flat.data_ptr(), out.data_ptr(), o.count, o.dtype, r.op, Algo::kAuto));
    });
  }
  // Parts of different sizes (torch's test_reduce_scatter gives rank r r elements, as Gloo
  // allows): one reduce per rank, of its part, to it; this rank's own part reduced in
  // `out`. Every reduce's header carries its part's size, so ranks whose lists disagree
  // raise a mismatch instead of mixing parts.
  std::vector<int64_t> sizes;
  for (const auto& t : ins) sizes.push_back(t.numel());
  const std::vector<at::Tensor> parts = flat.split_with_sizes(sizes);
  out.copy_(parts[rank_].view(out.sizes()));
  return run(work, !opts.asyncOp, [&](TorchWork& w) {
    w.keep(flat);
    w.keep(out);
    for (int root = 0; root < size_; ++root) {
      void* data = root == rank_ ? out.data_ptr() : parts[root].data_ptr();
      w.add(comm_->reduce(data, parts[root].numel(), o.dtype, r.op, root));
    }
  });
}

WorkPtr Backend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                 const c10d::ReduceScatterOptions& opts) {
  const char* method = "reduce_scatter_tensor_coalesced";
  if (outputs.size() != inputs.size()) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, ": ", outputs.size(), " outputs for ",
                                         inputs.size(), " inputs"));
  }
  const Reduction r = reduction(opts.reduceOp, method);
  std::vector<at::Tensor> ins;
  std::vector<Buffer> inBufs, outBufs;
  for (size_t k = 0; k < inputs.size(); ++k) {
    check(inputs[k], method, "inputs");
    outBufs.push_back(check(outputs[k], method, "outputs"));
    checkSameDType({outputs[k]}, inputs[k], method);
    checkNumel(inputs[k], outputs[k].numel() * size_, method, "inputs");
  }
  onCuda(method, outputs, inputs);
  for (const auto& t : inputs) {
    ins.push_back(r.premul() ? premultiply(r, t, false, method) : t);
    inBufs.push_back(check(ins.back(), method, "inputs"));
  }
  return run(make(OpType::REDUCE_SCATTER_TENSOR_COALESCED, method, outputs), !opts.asyncOp, [&](TorchWork& w) {
    for (auto& t : ins) w.keep(t);
    for (size_t k = 0; k < ins.size(); ++k) addReduceScatter(w, inBufs[k], outBufs[k], r.op, method);
  });
}

namespace {

// One span per rank over `t`'s rows (dim 0), `splits` rows each (empty: equal parts).
std::vector<Span> rowSpans(const at::Tensor& t, const std::vector<int64_t>& splits, int size, const char* method,
                           const char* what) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t rowElems = rows == 0 ? 0 : t.numel() / rows;
  const bool even = splits.empty();
  if (even && rows % size != 0) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, "(", what, "): ", rows,
                                         " rows do not split into ", size, " equal parts"));
  }
  if (!even && static_cast<int>(splits.size()) != size) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, ": ", splits.size(), " ", what,
                                         " split sizes, the group has ", size, " ranks"));
  }
  int64_t total = 0;
  for (int64_t p : splits) {
    if (p < 0) C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, ": negative split size ", p));
    total += p;
  }
  if (!even && total != rows) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: ", method, "(", what, "): split sizes add up to ", total,
                                         " rows, the tensor has ", rows));
  }
  std::vector<Span> out(size);
  char* base = static_cast<char*>(t.data_ptr());
  int64_t offset = 0;
  for (int q = 0; q < size; ++q) {
    const int64_t part = even ? rows / size : splits[q];
    out[q] = Span{base + offset * rowElems * t.element_size(), static_cast<size_t>(part * rowElems)};
    offset += part;
  }
  return out;
}

}  // namespace

WorkPtr Backend::alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                               std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) {
  const char* method = "alltoall_base";
  const Buffer i = check(input, method, "input");
  check(output, method, "output");
  checkSameDType({output}, input, method);
  const bool cuda = onCuda(method, {input, output});
  auto work = make(OpType::ALLTOALL_BASE, method, {output});
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  at::Tensor in = cuda ? hostInput(input) : input;
  at::Tensor out = cuda ? hostOutput(output, back) : output;
  std::vector<Span> ins = rowSpans(in, inputSplits, size_, method, "input");
  std::vector<Span> outs = rowSpans(out, outputSplits, size_, method, "output");
  copyBackWhenDone(work, std::move(back));
  return run(work, !opts.asyncOp, [&](TorchWork& w) {
    w.keep(in);
    w.add(comm_->allToAll(std::move(ins), std::move(outs), i.dtype));
  });
}

WorkPtr Backend::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                          const c10d::AllToAllOptions& opts) {
  const char* method = "alltoall";
  if (static_cast<int>(inputs.size()) != size_ || static_cast<int>(outputs.size()) != size_) {
    C10_THROW_ERROR(ValueError, c10::str("pycollect backend: alltoall: ", inputs.size(), " inputs and ",
                                         outputs.size(), " outputs; the group has ", size_, " ranks"));
  }
  if (size_ == 0) C10_THROW_ERROR(ValueError, "pycollect backend: alltoall: empty group");
  for (const auto& t : inputs) check(t, method, "input_tensors");
  for (const auto& t : outputs) check(t, method, "output_tensors");
  checkSameDType(inputs, inputs[0], method);
  checkSameDType(outputs, inputs[0], method);
  auto work = make(OpType::ALLTOALL, method, outputs);
  HostSpans host = hostSpans(work, inputs, outputs, method);
  const DType dtype = check(inputs[0], method, "input_tensors").dtype;
  return run(work, !opts.asyncOp, [&](TorchWork& w) {
    w.add(comm_->allToAll(std::move(host.ins), std::move(host.outs), dtype));
  });
}

}  // namespace pycollect::torchb
