// Pipelining the two levels of a hierarchical all-reduce (allreduce_hierarchical.cc).
//
// Unpipelined, a host's ranks reduce-scatter the whole vector over shared memory, then
// the rails all-reduce their shares across the network, then the host all-gathers: the
// shared-memory phases add to the cable's time. Cut into pieces, they hide under it:
// while piece k crosses the network on the rails, the host reduce-scatters piece k+1 and
// all-gathers piece k-1.
//
//   intra-host:  RS0 | RS1      AG0 | RS2      AG1 | ...         AGp-1
//   rails:            | AR0            | AR1           | ...  ARp-1 |
//
// One thread runs both levels. The intra-host rings wait as they always do, and every
// one of their waits also polls the rails' ring (Context::Background), which takes its
// next step as soon as the step before it is done. So the network is never idle while
// a shared-memory phase runs, and nothing blocks on the network that could run instead.
//
// The rails' ring is allreduce_ring.cc's without its segments: each step sends one whole
// chunk of the piece to the right and receives one from the left, into a slot reduced
// in (reduce-scatter half) or straight into place (all-gather half); a step starts once
// the step before it sent and received everything (so no chunk is overwritten while
// still leaving). The pieces go one after another, in the same order on every rank of a
// rail, so its links carry the same messages in the same order at both ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/context.h"
#include "common/types.h"

namespace pycollect {

class RailAllreduce : public Background {
 public:
  // Ring all-reduces over `rail` (a view of the call), one queued piece after another.
  // `slot` takes a received chunk before it is reduced in (the largest chunk's bytes);
  // `divisor` > 1 divides each piece's result once it is reduced (AVG).
  RailAllreduce(Context& rail, char* slot, DType dtype, ReduceOp op, int divisor);
  // Queues `count` elements at `data`; returns the piece's index.
  size_t push(char* data, size_t count);
  bool done(size_t piece) const { return finished_ > piece; }
  void poll() override;

 private:
  struct Piece {
    char* data;
    size_t count;
  };
  void post();  // posts step step_ of piece finished_

  Context& rail_;
  char* slot_;
  const DType dtype_;
  const ReduceOp op_;
  const int divisor_;
  const size_t es_;
  std::vector<Piece> pieces_;
  size_t finished_ = 0;  // pieces done; the next one runs
  int step_ = 0;         // of the running piece: 0 .. 2 (n - 1)
  bool posted_ = false;  // step_'s transfers are on the links
  uint64_t sendTicket_ = 0, recvTicket_ = 0;
  bool sends_ = false, recvs_ = false;  // step_ moves bytes (a chunk may be empty)
};

// How many pieces a hierarchical all-reduce of `bytes` is cut into: pieces of at least
// kPieceSegments pipelining segments (4 MiB at the default 512 KiB), so that each rank's
// share of a piece still fills the intra-host rings' pipelines; at most kMaxPieces. One
// piece runs the levels one after the other.
constexpr size_t kPieceSegments = 8;
constexpr int kMaxPieces = 16;
int pipelinePieces(const Context& ctx, size_t bytes);

}  // namespace pycollect
