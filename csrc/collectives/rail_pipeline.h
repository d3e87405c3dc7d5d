// Pipelining the two levels of the hierarchical all-reduce, all-gather and reduce-scatter
// (allreduce_hierarchical.cc and its siblings).
//
// Unpipelined, a hierarchical all-reduce's host reduce-scatters the whole vector over
// shared memory, then the rails all-reduce their shares across the network, then the host
// all-gathers: the shared-memory phases add to the cable's time. Cut into slices, they
// hide under it: while slice k crosses the network on the rails, the host reduce-scatters
// slice k+1 and all-gathers slice k-1.
//
//   intra-host:  RS0 | RS1      AG0 | RS2      AG1 | ...         AGp-1
//   rails:            | AR0            | AR1           | ...  ARp-1 |
//
// (The all-gather runs its rails first, the host's all-gather of slice k under the rails'
// slice k+1; the reduce-scatter its host first, the rails' slice k under the host's k+1.)
//
// One thread runs both levels. The intra-host rings wait as they always do, and every
// one of their waits also polls the rails' ring (Context::Background), which takes its
// next step as soon as the step before it is done. So the network is never idle while a
// shared-memory phase runs, and nothing blocks on the network that could run instead.
//
// The rails' ring is the one-level rings' (allreduce_ring.cc, reduce_scatter_ring.cc,
// allgather_ring.cc) without their segments: each step sends one whole block of the slice
// to the right and receives one from the left, into a slot reduced in (reduce-scatter
// steps: in place, `buf` holds the partial sums) or straight into place (all-gather
// steps). A step starts once the step before it sent and received everything, so no
// block is overwritten while it is still leaving. The slices go one after another, in the
// same order on every rank of a rail, so its links carry the same messages in the same
// order at both ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/blocks.h"
#include "collectives/context.h"
#include "common/types.h"

namespace pycollect {

// A ring over the rails whose slices a pipelined hierarchical call queues, polled by the
// intra-host level's waits: RailRing, or CompressedRing (compressed_ring.h) for a
// compressed all-reduce.
class SliceRing : public Background {
 public:
  bool done(size_t slice) const { return finished_ > slice; }
  // What the ring waits for now, for a timeout's message: "slice 2 of 4, inter-host
  // reduce-scatter step 0: receive from rank 3"; and that rank, for the flight recorder
  // (flight::kAnyPeer when it waits on nobody).
  virtual std::string waiting() const = 0;
  virtual int waitingFor() const = 0;

 protected:
  size_t finished_ = 0;  // slices done; the next one runs
};

class RailRing : public SliceRing {
 public:
  enum class Kind { kAllReduce, kReduceScatter, kAllGather };
  // Rings over `rail` (a view of the call), one queued slice after another. `slot` takes
  // a received block before it is reduced in (the largest block's bytes); `divisor` > 1
  // divides each result once (AVG).
  RailRing(Context& rail, char* slot, DType dtype, ReduceOp op, int divisor);
  // Queues a ring over `blocks` of `buf` (one per rank of the rail): all-reduce (every
  // block's reduction, in place), reduce-scatter (this rank's block's reduction to `out`,
  // packed; the other blocks of `buf` are overwritten with partial sums) or all-gather
  // (every block in place). Returns the slice's index.
  size_t push(Kind kind, char* buf, std::vector<Block> blocks, char* out = nullptr);
  void poll() override;
  std::string waiting() const override;
  int waitingFor() const override;

 private:
  struct Slice {
    Kind kind;
    char* buf;
    std::vector<Block> blocks;
    char* out;
  };
  int steps(const Slice& sl) const;
  bool scatters(const Slice& sl) const;  // step_ is a reduce-scatter step
  int from(const Slice& sl) const;       // the block step_ receives
  void post(const Slice& sl);            // posts step_
  void received(const Slice& sl);        // step_'s block arrived: reduce it in
  void finish(const Slice& sl);          // the slice's last steps done
  // The link of a transfer of the running step not yet done (its receive first), or null.
  Link* unfinished(bool* receive) const;

  Context& rail_;
  char* slot_;
  const DType dtype_;
  const ReduceOp op_;
  const int divisor_;
  const size_t es_;
  std::vector<Slice> slices_;
  int step_ = 0;         // of the running slice
  bool posted_ = false;  // step_'s transfers are on the links
  uint64_t sendTicket_ = 0, recvTicket_ = 0;  // the step's last (each link's queue is FIFO)
  bool sends_ = false, recvs_ = false;        // step_ moves bytes (a block may be empty)
};

// Part k of `parts` of every range of `b` (each cut as Chunks cuts it): slice k of a
// pipelined call, block by block.
Block partOf(const Block& b, int k, int parts);
std::vector<Block> partOf(const std::vector<Block>& blocks, int k, int parts);

// How many slices a hierarchical call moving `bytes` per rank is cut into: bytes divided
// by kSliceSegments pipelining segments (4 MiB at the default 512 KiB), rounded down, so
// that each rank's share of a slice still fills the intra-host rings' pipelines; at least
// 1, at most kMaxSlices. So a call is pipelined from 2 x kSliceSegments segments (8 MiB)
// on; below that it is one slice, which runs the levels one after the other.
constexpr size_t kSliceSegments = 8;
constexpr int kMaxSlices = 16;
int pipelineSlices(const Context& ctx, size_t bytes);

}  // namespace pycollect
