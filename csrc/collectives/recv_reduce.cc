#include "collectives/recv_reduce.h"

#include <algorithm>
#include <utility>

#include "reduce/reduce.h"

namespace pycollect {

size_t postedAhead(const Context& ctx, size_t segments) {
  return std::min(segments, static_cast<size_t>(std::max(1, ctx.tunables.inflight)));
}

size_t recvReduceScratch(const Context& ctx, size_t count, DType dtype) {
  const size_t es = dtypeSize(dtype);
  Segments segs = pipelineSegments(ctx, count, es);
  return postedAhead(ctx, segs.count) * std::min(segs.per, count) * es;
}

SegmentedRecvReduce::SegmentedRecvReduce(Context& ctx, Link& from, char* dst, size_t count, DType dtype,
                                         ReduceOp op, char* scratch, std::function<void(size_t)> beforePost)
    : ctx_(ctx), from_(from), dst_(dst), count_(count), dtype_(dtype), op_(op), scratch_(scratch),
      beforePost_(std::move(beforePost)), es_(dtypeSize(dtype)), segs_(pipelineSegments(ctx, count, es_)),
      slots_(postedAhead(ctx, segs_.count)), slotBytes_(std::min(segs_.per, count) * es_), tickets_(segs_.count) {
  for (size_t j = 0; j < slots_; ++j) post(j);
}

void SegmentedRecvReduce::post(size_t j) {
  if (beforePost_) beforePost_(j);
  tickets_[j] = from_.postRecv(slot(j), segs_.size(j, count_) * es_);
}

void SegmentedRecvReduce::reduce(size_t j) {
  char* out = dst_ + segs_.begin(j, count_) * es_;
  ctx_.waitRecv(from_, tickets_[j]);
  pycollect::reduce(out, out, slot(j), segs_.size(j, count_), dtype_, op_);
  if (j + slots_ < segs_.count) post(j + slots_);
}

void recvReduce(Context& ctx, Link& from, char* dst, size_t count, DType dtype, ReduceOp op,
                char* scratch) {
  if (count == 0) return;
  SegmentedRecvReduce r(ctx, from, dst, count, dtype, op, scratch);
  for (size_t j = 0; j < r.segments(); ++j) r.reduce(j);
}

}  // namespace pycollect
