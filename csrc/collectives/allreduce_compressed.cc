// Compressed ring all-reduce: all_reduce(compress="bf16" | "int8") on float32. Fewer bytes
// cross the wire (bf16: 1/2, int8: 1/4 plus a scale per 256 values), the sums are made in
// float32, and every rank ends with bit-identical results.
//
// It is the ring all-reduce (allreduce_ring.cc) with an encoder before every send and a
// decoder after every receive (reduce/compress.h has the formats):
//   Reduce-scatter, steps s = 0 .. n-2: rank r encodes its partial sum of block r-s-1
//   (its own input at s = 0) and sends the bytes right; it receives block r-s-2's bytes
//   from the left, decodes them and adds them to its float32 copy. After n-1 steps it holds
//   block r summed over the ring (each partial sum was encoded once on its way).
//   The owner's encode: rank r divides block r (AVG), encodes it once, and decodes those
//   very bytes back into its own buffer. From here on block r exists only as those bytes.
//   All-gather, steps s = 0 .. n-2: rank r sends block r-s's bytes right (its own first,
//   then what it received one step before, forwarded unchanged) and decodes block
//   r-s-1's bytes from the left into place.
// Every rank decodes the same bytes of block b, the owner included, with the same exact
// decoder: the results are bit-identical, not merely close. Re-encoding a forwarded block
// would not be: that is why the all-gather forwards bytes, never values.
//
// Worked example, 3 ranks, blocks A B C, int8 (E = encode, D = decode):
//   RS step 0: rank 0 sends E(C0), rank 1 E(A1), rank 2 E(B2); rank 0 gets E(B2):
//              B = B0 + D(E(B2)); rank 1 gets A = A1 + D(E(A0))...
//   RS step 1: rank 0 sends E(B0 + D(E(B2))) to rank 1, gets rank 2's partial A: A done at
//              rank 0; likewise B at rank 1, C at rank 2.
//   Owner:     rank 0 makes wA = E(A) and sets A = D(wA); rank 1 wB, rank 2 wC.
//   AG:        wA, wB, wC go once around the ring as bytes; every rank decodes them.
//
// Error bound. A value is encoded k times on its way: once per hop of the reduce-scatter
// (k-1, the partial sums) and once by its owner, where k is the ring's length (the group's
// size here, the number of hosts in the hierarchical all-reduce). Each encode errs by at
// most u·|x| (bf16, u = 2^-8) or max|x| / 254 over its 256-value block (int8), and every
// partial sum is at most A = sum over ranks of |x_rank| at that position. So, up to
// float32's own rounding of the sums:
//   bf16: |result - exact| <= k · 2^-8 · A[i]
//   int8: |result - exact| <= k · max(A over the 511 values centred on i) / 254
// (any 256-value block holding i lies in that window; docs/compression.md, tests check it).
//
// Pipelining. Each block is cut into units of tunables.segmentBytes of float32 (a multiple
// of 256 values, so that int8 runs lay back to back on the wire). A step posts every
// receive of its block at once, and encodes and sends its units two ahead of what the link
// has taken, so encoding the next unit overlaps the wire; each unit received is decoded at
// once. A step starts when the step before it has sent and received everything: the next
// step sends what this one received.
//
// Wire memory: one slice's encoded blocks (block b at wireAt[b]); each step sends from one
// block's bytes and receives into another's, and a block's bytes are rewritten only by the
// step that next sends it, after they were decoded.
#include <algorithm>
#include <string>

#include "collectives/collectives.h"
#include "collectives/compressed_ring.h"
#include "reduce/compress.h"
#include "reduce/reduce.h"

namespace pycollect {

namespace {
constexpr size_t kAhead = 2;  // units sent but not yet taken by the link

size_t unitValues(const Context& ctx) {
  const size_t per = std::max<size_t>(1, ctx.tunables.segmentBytes / 4) / kInt8Block * kInt8Block;
  return std::max(per, kInt8Block);
}

size_t roundUp8(size_t n) { return (n + 7) / 8 * 8; }
}  // namespace

CompressedRing::CompressedRing(Context& ring, Compress c, int divisor)
    : ring_(ring), c_(c), divisor_(divisor), per_(unitValues(ring)) {}

std::vector<size_t> CompressedRing::wireLayout(const std::vector<Range>& blocks) const {
  std::vector<size_t> at{0};
  for (const Range& b : blocks) at.push_back(at.back() + roundUp8(wireBytes(c_, b.length)));
  return at;
}

size_t CompressedRing::wireCapacity(const std::vector<Range>& blocks) const { return wireLayout(blocks).back(); }

size_t CompressedRing::push(float* buf, std::vector<Range> blocks) {
  std::vector<size_t> at = wireLayout(blocks);
  at.pop_back();  // the total: wireCapacity's
  slices_.push_back({buf, std::move(blocks), std::move(at)});
  return slices_.size() - 1;
}

std::vector<CompressedRing::Unit> CompressedRing::unitsOf(const Slice& sl, int block) const {
  std::vector<Unit> units;
  const Range& b = sl.blocks[block];
  for (size_t at = 0; at < b.length; at += per_) {
    const size_t len = std::min(per_, b.length - at);
    units.push_back({b.offset + at, len, sl.wireAt[block] + wireBytes(c_, at), wireBytes(c_, len)});
  }
  return units;
}

// Reduce-scatter step s sends block r-s-1 and receives r-s-2 (ending at block r);
// all-gather step s sends block r-s (its own first) and receives r-s-1.
int CompressedRing::outBlock() const {
  const int r = ring_.rank;
  return scatters() ? ring_.wrap(r - step_ - 1) : ring_.wrap(r - (step_ - (ring_.size - 1)));
}

int CompressedRing::inBlock() const { return ring_.wrap(outBlock() - 1); }

void CompressedRing::start(const Slice& sl) {
  sends_ = unitsOf(sl, outBlock());
  recvs_ = unitsOf(sl, inBlock());
  sendTickets_.assign(sends_.size(), 0);
  recvTickets_.assign(recvs_.size(), 0);
  sendsPosted_ = sendsDone_ = recvsDone_ = 0;
  const char* phase = scatters() ? "reduce-scatter" : "all-gather";
  const int s = scatters() ? step_ : step_ - (ring_.size - 1);
  ring_.setUnit(phase, s, inBlock(), -1);
  Link& left = ring_.link(ring_.left());
  for (size_t i = 0; i < recvs_.size(); ++i) recvTickets_[i] = left.postRecv(wire_ + recvs_[i].wire, recvs_[i].bytes);
  started_ = true;
}

void CompressedRing::sendNext(const Slice& sl) {
  const Unit& u = sends_[sendsPosted_];
  char* w = wire_ + u.wire;
  if (scatters()) encode(c_, sl.buf + u.offset, u.length, w);  // all-gather: the bytes as they came
  sendTickets_[sendsPosted_++] = ring_.link(ring_.right()).postSend(w, u.bytes);
}

void CompressedRing::consume(const Slice& sl, const Unit& u) {
  float* values = sl.buf + u.offset;
  const char* w = wire_ + u.wire;
  if (!scatters()) return decode(c_, w, u.length, values);
  decodeAdd(c_, w, u.length, values);
  if (step_ < ring_.size - 2) return;
  // Our own block, summed over the ring: encoded once, and our copy is what it decodes to.
  if (divisor_ > 1) divide(values, u.length, DType::kFloat32, divisor_);
  encode(c_, values, u.length, wire_ + u.wire);
  decode(c_, wire_ + u.wire, u.length, values);
}

void CompressedRing::poll() {
  const int n = ring_.size;
  while (finished_ < slices_.size()) {
    const Slice& sl = slices_[finished_];
    if (n == 1) {  // nothing crosses a wire, so nothing is compressed
      const Range& b = sl.blocks[0];
      if (divisor_ > 1) divide(sl.buf + b.offset, b.length, DType::kFloat32, divisor_);
      ++finished_;
      continue;
    }
    if (!started_) start(sl);
    Link& left = ring_.link(ring_.left());
    Link& right = ring_.link(ring_.right());
    while (recvsDone_ < recvs_.size() && left.received(recvTickets_[recvsDone_])) consume(sl, recvs_[recvsDone_++]);
    for (;;) {
      while (sendsDone_ < sendsPosted_ && right.sent(sendTickets_[sendsDone_])) ++sendsDone_;
      if (sendsPosted_ == sends_.size() || sendsPosted_ - sendsDone_ >= kAhead) break;
      sendNext(sl);
    }
    if (recvsDone_ < recvs_.size() || sendsDone_ < sends_.size()) return;
    started_ = false;
    if (++step_ == 2 * (n - 1)) {
      step_ = 0;
      ++finished_;
    }
  }
}

std::string CompressedRing::waiting() const {
  if (finished_ >= slices_.size()) return "nothing (every slice is done)";
  const int s = scatters() ? step_ : step_ - (ring_.size - 1);
  std::string w = std::string("compressed ") + compressName(c_) + " slice " + std::to_string(finished_ + 1) + " of " +
                  std::to_string(slices_.size()) + ", " + (scatters() ? "reduce-scatter" : "all-gather") +
                  " step " + std::to_string(s) + ": ";
  if (!started_) return w + "about to post";
  if (recvsDone_ < recvs_.size()) return w + "receive from rank " + std::to_string(ring_.link(ring_.left()).peer());
  return w + "send to rank " + std::to_string(ring_.link(ring_.right()).peer());
}

int CompressedRing::waitingFor() const {
  if (finished_ >= slices_.size() || !started_) return flight::kAnyPeer;
  return recvsDone_ < recvs_.size() ? ring_.link(ring_.left()).peer() : ring_.link(ring_.right()).peer();
}

void runCompressedRing(Context& ring, Compress c, int divisor, float* buf, const std::vector<Range>& blocks,
                       const std::function<char*(size_t)>& memory) {
  CompressedRing rc(ring, c, divisor);
  rc.setWire(memory(rc.wireCapacity(blocks)));
  const size_t slice = rc.push(buf, blocks);
  ring.setBackground(&rc);
  ring.waitFor([&] { return rc.done(slice); }, [&] { return rc.waiting(); }, rc.waitingFor());
  ring.setBackground(nullptr);
  ring.drainSends();
}

void allreduceCompressed(Context& ctx, void* data, size_t count, ReduceOp op, Compress c) {
  ctx.exchangeHeaders(ctx.ringPeers());
  const int divisor = op == ReduceOp::kAvg ? ctx.size : 1;
  if (ctx.size == 1 || count == 0) {
    if (divisor > 1) divide(data, count, DType::kFloat32, divisor);
    return;
  }
  const Chunks chunks(count, ctx.size);
  std::vector<Range> blocks;
  for (int b = 0; b < ctx.size; ++b) blocks.push_back({chunks.offset(b), chunks.length(b)});
  runCompressedRing(ctx, c, divisor, static_cast<float*>(data), blocks,
                    [&](size_t bytes) { return ctx.scratch(bytes); });
}

}  // namespace pycollect
