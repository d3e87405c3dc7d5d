// The list forms of all-gather and reduce-scatter: torch's all_gather(tensor_list, tensor)
// and reduce_scatter(output, input_list), one tensor per rank on this side.
//
// On the wire they are the flat calls (all-gather into one buffer, reduce-scatter of one
// buffer): the same header, kind and count, so ranks that pass a list and ranks that pass
// one buffer (or whose list the general path had to take) meet in the same call.
//
// All-gather: on the shared arena each rank's part is copied from its slot straight into
// its tensor, as the flat form copies it into its place in the buffer; any other algorithm
// gathers into a buffer of this call's own and the parts are copied out after.
// Reduce-scatter: the parts are packed end to end into a buffer (one copy of the input,
// small next to the call for the sizes lists are used at) and the flat algorithm runs.
//
// Example, all-gather of 2 floats on 3 ranks into [a, b, c]: on the arena, rank r copies
// slot p into tensor p (its own part from its input); on the ring, into a 6-float buffer,
// then elements 2p, 2p + 1 into tensor p.
#include <cstring>
#include <vector>

#include "collectives/collectives.h"

namespace pycollect {

void allgatherInto(Algo algo, Context& ctx, Span in, const std::vector<Span>& outs, DType dtype) {
  if (algo == Algo::kShared && allgatherSharedInto(ctx, in, outs, dtype)) return;
  const size_t bytes = in.count * dtypeSize(dtype);
  std::vector<char> flat(outs.size() * bytes);  // the algorithms use ctx.scratch themselves
  allgatherWith(algo, ctx, in.data, flat.data(), in.count, dtype);
  for (size_t p = 0; p < outs.size(); ++p) {
    if (bytes > 0) std::memcpy(outs[p].data, flat.data() + p * bytes, bytes);
  }
}

void reduceScatterFrom(Algo algo, Context& ctx, const std::vector<Span>& ins, Span out, DType dtype, ReduceOp op) {
  const size_t bytes = out.count * dtypeSize(dtype);
  std::vector<char> flat(ins.size() * bytes);
  for (size_t p = 0; p < ins.size(); ++p) {
    if (bytes > 0) std::memcpy(flat.data() + p * bytes, ins[p].data, bytes);
  }
  reduceScatterWith(algo, ctx, flat.data(), out.data, out.count, dtype, op);
}

}  // namespace pycollect
