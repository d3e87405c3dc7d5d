#include "collectives/rail_pipeline.h"

#include <algorithm>

#include "reduce/reduce.h"

namespace pycollect {

RailAllreduce::RailAllreduce(Context& rail, char* slot, DType dtype, ReduceOp op, int divisor)
    : rail_(rail), slot_(slot), dtype_(dtype), op_(op), divisor_(divisor), es_(dtypeSize(dtype)) {}

size_t RailAllreduce::push(char* data, size_t count) {
  pieces_.push_back({data, count});
  return pieces_.size() - 1;
}

void RailAllreduce::post() {
  const int n = rail_.size, r = rail_.rank;
  const Piece& p = pieces_[finished_];
  const Chunks chunks(p.count, n);
  const bool scatter = step_ < n - 1;  // the reduce-scatter half
  const int s = scatter ? step_ : step_ - (n - 1);
  const int out = ((scatter ? r - s : r + 1 - s) % n + n) % n;
  const int in = ((scatter ? r - s - 1 : r - s) % n + n) % n;
  rail_.setUnit(scatter ? "reduce-scatter" : "all-gather", step_, in, -1);
  sends_ = chunks.length(out) > 0;
  recvs_ = chunks.length(in) > 0;
  if (sends_) sendTicket_ = rail_.link(rail_.right()).postSend(p.data + chunks.offset(out) * es_, chunks.length(out) * es_);
  if (recvs_) {
    char* into = scatter ? slot_ : p.data + chunks.offset(in) * es_;
    recvTicket_ = rail_.link(rail_.left()).postRecv(into, chunks.length(in) * es_);
  }
  posted_ = true;
}

void RailAllreduce::poll() {
  const int n = rail_.size;
  while (finished_ < pieces_.size()) {
    const Piece& p = pieces_[finished_];
    if (posted_) {
      if (sends_ && !rail_.link(rail_.right()).sent(sendTicket_)) return;
      if (recvs_ && !rail_.link(rail_.left()).received(recvTicket_)) return;
      if (recvs_ && step_ < n - 1) {
        const Chunks chunks(p.count, n);
        const int in = ((rail_.rank - step_ - 1) % n + n) % n;
        char* mine = p.data + chunks.offset(in) * es_;
        rail_.setUnit("reduce-scatter", step_, in, -1);
        reduce(mine, mine, slot_, chunks.length(in), dtype_, op_);
      }
      posted_ = false;
      ++step_;
    }
    if (step_ < 2 * (n - 1)) {
      post();
      continue;  // an empty step is done at once
    }
    if (divisor_ > 1) divide(p.data, p.count, dtype_, divisor_);
    ++finished_;
    step_ = 0;
  }
}

int pipelinePieces(const Context& ctx, size_t bytes) {
  const size_t piece = kPieceSegments * std::max<size_t>(1, ctx.tunables.segmentBytes);
  return static_cast<int>(std::clamp<size_t>(bytes / piece, 1, kMaxPieces));
}

}  // namespace pycollect
