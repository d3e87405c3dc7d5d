#include "collectives/rail_pipeline.h"

#include <algorithm>
#include <cstring>

#include "reduce/reduce.h"

namespace pycollect {

RailRing::RailRing(Context& rail, char* slot, DType dtype, ReduceOp op, int divisor)
    : rail_(rail), slot_(slot), dtype_(dtype), op_(op), divisor_(divisor), es_(dtypeSize(dtype)) {}

size_t RailRing::push(Kind kind, char* buf, std::vector<Block> blocks, char* out) {
  slices_.push_back({kind, buf, std::move(blocks), out});
  return slices_.size() - 1;
}

int RailRing::steps(const Slice& sl) const {
  return (sl.kind == Kind::kAllReduce ? 2 : 1) * (rail_.size - 1);
}

bool RailRing::scatters(const Slice& sl) const {
  return sl.kind == Kind::kReduceScatter || (sl.kind == Kind::kAllReduce && step_ < rail_.size - 1);
}

// Reduce-scatter step s sends block r-s-1 (our input, then the partial sums we made) and
// receives block r-s-2's partial sums, ending at our own block; all-gather step s sends
// block r-s (ours first) and receives block r-s-1.
int RailRing::from(const Slice& sl) const {
  const int n = rail_.size;
  const int s = scatters(sl) || sl.kind == Kind::kAllGather ? step_ : step_ - (n - 1);
  return rail_.wrap(rail_.rank - s - (scatters(sl) ? 2 : 1));
}

void RailRing::post(const Slice& sl) {
  const int in = from(sl), out = rail_.wrap(in + 1);
  const char* phase = scatters(sl) ? "reduce-scatter" : "all-gather";
  rail_.setUnit(phase, step_, in, -1);
  Link& right = rail_.link(rail_.right());
  Link& left = rail_.link(rail_.left());
  sends_ = recvs_ = false;
  for (const BlockUnit& u : unitsOf(sl.blocks[out], SIZE_MAX)) {
    sendTicket_ = right.postSend(sl.buf + u.offset * es_, u.length * es_);
    sends_ = true;
  }
  for (const BlockUnit& u : unitsOf(sl.blocks[in], SIZE_MAX)) {
    char* into = scatters(sl) ? slot_ + u.position * es_ : sl.buf + u.offset * es_;
    recvTicket_ = left.postRecv(into, u.length * es_);
    recvs_ = true;
  }
  posted_ = true;
}

void RailRing::received(const Slice& sl) {
  if (!scatters(sl)) return;
  const int n = rail_.size, in = from(sl);
  const bool last = step_ == n - 2;  // the block is ours, reduced over the rail
  rail_.setUnit("reduce-scatter", step_, in, -1);
  for (const BlockUnit& u : unitsOf(sl.blocks[in], SIZE_MAX)) {
    char* mine = sl.buf + u.offset * es_;
    char* into = last && sl.kind == Kind::kReduceScatter ? sl.out + u.position * es_ : mine;
    reduce(into, mine, slot_ + u.position * es_, u.length, dtype_, op_);
    if (last && divisor_ > 1) divide(into, u.length, dtype_, divisor_);
  }
}

void RailRing::finish(const Slice& sl) {
  if (rail_.size > 1) return;  // one host: the ring had no steps, our block is the result
  for (const BlockUnit& u : unitsOf(sl.blocks[0], SIZE_MAX)) {
    char* into = sl.kind == Kind::kReduceScatter ? sl.out + u.position * es_ : sl.buf + u.offset * es_;
    if (into != sl.buf + u.offset * es_) std::memmove(into, sl.buf + u.offset * es_, u.length * es_);
    if (sl.kind != Kind::kAllGather && divisor_ > 1) divide(into, u.length, dtype_, divisor_);
  }
}

void RailRing::poll() {
  while (finished_ < slices_.size()) {
    const Slice& sl = slices_[finished_];
    if (posted_) {
      if (sends_ && !rail_.link(rail_.right()).sent(sendTicket_)) return;
      if (recvs_ && !rail_.link(rail_.left()).received(recvTicket_)) return;
      received(sl);
      posted_ = false;
      ++step_;
    }
    if (step_ < steps(sl)) {
      post(sl);
      continue;  // an empty step is done at once
    }
    finish(sl);
    ++finished_;
    step_ = 0;
  }
}

Link* RailRing::unfinished(bool* receive) const {
  if (finished_ >= slices_.size() || !posted_) return nullptr;
  Link& left = rail_.link(rail_.left());
  Link& right = rail_.link(rail_.right());
  *receive = recvs_ && !left.received(recvTicket_);
  if (*receive) return &left;
  return sends_ && !right.sent(sendTicket_) ? &right : nullptr;
}

std::string RailRing::waiting() const {
  if (finished_ >= slices_.size()) return "nothing (every slice is done)";
  const Slice& sl = slices_[finished_];
  const std::string s = "slice " + std::to_string(finished_ + 1) + " of " + std::to_string(slices_.size()) + ", " +
                        (scatters(sl) ? "reduce-scatter" : "all-gather") + " step " + std::to_string(step_) + ": ";
  bool receive = false;
  const Link* l = unfinished(&receive);
  if (l == nullptr) return s + "about to post";
  return s + (receive ? "receive from rank " : "send to rank ") + std::to_string(l->peer());
}

int RailRing::waitingFor() const {
  bool receive = false;
  const Link* l = unfinished(&receive);
  return l == nullptr ? flight::kAnyPeer : l->peer();
}

Block partOf(const Block& b, int k, int parts) {
  Block part;
  for (const Range& r : b) {
    const Chunks cut(r.length, parts);
    part.push_back({r.offset + cut.offset(k), cut.length(k)});
  }
  return part;
}

std::vector<Block> partOf(const std::vector<Block>& blocks, int k, int parts) {
  std::vector<Block> out;
  for (const Block& b : blocks) out.push_back(partOf(b, k, parts));
  return out;
}

int pipelineSlices(const Context& ctx, size_t bytes) {
  const size_t slice = kSliceSegments * std::max<size_t>(1, ctx.tunables.segmentBytes);
  return static_cast<int>(std::clamp<size_t>(bytes / slice, 1, kMaxSlices));
}

}  // namespace pycollect
