// Coalesced all-reduce and all-gather: many tensors, one call.
//
// The tensors (one dtype) are packed end to end into one buffer, and that buffer goes
// through the ordinary algorithm once: one header (kind *_COALESCED, count = the total
// elements, root = the number of tensors, so ranks that pass different lists mismatch)
// and one pass over the links, instead of one header and one latency per tensor. Then
// the results are unpacked. The cost is a copy in and a copy out, small next to the
// wire for the many small tensors this is for (DDP's and torch's coalesced calls).
//
// Example, all-gather of [a (2 elements), b (3)] on 2 ranks: each rank packs a|b (5
// elements), the all-gather (ring or Bruck) gathers a0 b0 | a1 b1 (10), and
// outs = [a0, b0, a1, b1].
#include <cstring>

#include "collectives/collectives.h"

namespace pycollect {
namespace {

size_t totalCount(const std::vector<Span>& spans) {
  size_t total = 0;
  for (const Span& s : spans) total += s.count;
  return total;
}

// Copies spans end to end into `dst`, or (unpack) `src` back into them.
void pack(const std::vector<Span>& spans, char* dst, size_t es) {
  for (const Span& s : spans) {
    if (s.count > 0) std::memcpy(dst, s.data, s.count * es);
    dst += s.count * es;
  }
}

void unpack(const char* src, const std::vector<Span>& spans, size_t es) {
  for (const Span& s : spans) {
    if (s.count > 0) std::memcpy(s.data, src, s.count * es);
    src += s.count * es;
  }
}

}  // namespace

void allreduceCoalesced(Context& ctx, const std::vector<Span>& tensors, DType dtype, ReduceOp op,
                        Algo algo) {
  const size_t es = dtypeSize(dtype);
  const size_t total = totalCount(tensors);
  std::vector<char> packed(total * es);  // the algorithms use ctx.scratch themselves
  pack(tensors, packed.data(), es);
  allreduceWith(algo, ctx, packed.data(), total, dtype, op);
  unpack(packed.data(), tensors, es);
}

void allgatherCoalesced(Context& ctx, const std::vector<Span>& ins, const std::vector<Span>& outs,
                        DType dtype, Algo algo) {
  const size_t es = dtypeSize(dtype);
  const size_t total = totalCount(ins);
  std::vector<char> gathered(ctx.size * total * es);
  char* own = gathered.data() + ctx.rank * total * es;
  pack(ins, own, es);
  allgatherWith(algo, ctx, own, gathered.data(), total, dtype);  // in place
  unpack(gathered.data(), outs, es);
}

}  // namespace pycollect
