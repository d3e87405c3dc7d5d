// Hierarchical all-reduce: the ranks of a host reduce among themselves over shared
// memory, so that only one share of the vector per rank crosses the network, then put
// the result back together within the host.
//
// With h hosts of L ranks each (hierarchy.h) and a vector of S bytes on every rank:
//   1. reduce-scatter within each host (the ring over its L ranks): local rank i ends
//      with chunk i (S/L bytes) reduced over its host;
//   2. all-reduce across hosts on each rail (the ring over local rank i of every host):
//      chunk i reduced over all ranks, on every rank of rail i;
//   3. all-gather within each host: every rank holds the whole result.
// Each host's cable then carries 2(h-1)/h x S each way (its L rails, each 2(h-1)/h x S/L),
// where the flat ring over all n = hL ranks carries 2(n-1)/n x S over every cable it
// crosses: 1.5x less at 2 hosts x 2 ranks, 1.75x at 2 x 4, 1.17x at 4 x 2. The host's
// phases move (L-1)/L x S per rank each over shared memory, far faster than the cable.
//
// Worked example, hosts [0, 1] [2, 3], every rank holding a vector of halves [a b]:
//   1. rank 0 gets a0+a1, rank 1 b0+b1; rank 2 a2+a3, rank 3 b2+b3
//   2. rail [0, 2] all-reduces a: ranks 0 and 2 hold a = a0+a1+a2+a3; rail [1, 3] b
//   3. ranks 0 and 1 swap a and b, ranks 2 and 3 too: every rank holds [a b].
//
// Uneven hosts (3 + 1 ranks, 2 + 2 + 1): each host has m = min(ranks per host) core
// ranks; an extra rank first hands its vector to its partner core rank, which reduces it
// in, and gets the result back at the end (shared memory both ways). Chunks are S/m.
//
// From 2 x kSliceSegments segments on (8 MiB at the default segment: pipelineSlices),
// the vector goes in slices and the levels overlap:
// slice k crosses the network while the host reduce-scatters slice k+1 and all-gathers
// slice k-1 (rail_pipeline.h). At 1 Gbit/s between namespace hosts, 64 MiB, that took
// 2 x 4 from 0.81 to 0.93 of the cable's bound (docs/hierarchy.md).
//
// Every rank ends with bit-identical results: each chunk is reduced in one order on one
// rail and only copied from there. AVG sums, and divides once by the group's size.
//
// Compressed (compress="bf16" | "int8", allreduce_compressed.cc): only the rails' phase 2
// crosses the network, so only it is compressed (CompressedRing in place of the rails'
// exact ring); the host's phases 1 and 3 stay exact float32 over shared memory. A value is
// then encoded once per host (h times), not once per rank, and the bound is the flat
// compressed ring's with k = h.
#include <memory>

#include "collectives/collectives.h"
#include "collectives/compressed_ring.h"
#include "collectives/levels.h"
#include "collectives/rail_pipeline.h"
#include "reduce/reduce.h"

namespace pycollect {

namespace {
// The compressed rail ring's blocks: our chunk cut in one share per host.
std::vector<Range> railShares(const Range& mine, int hosts) {
  std::vector<Range> shares;
  for (int h = 0; h < hosts; ++h) shares.push_back(partOf(Block{mine}, h, hosts)[0]);
  return shares;
}
}  // namespace

void allreduceHierarchical(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op, Compress compress) {
  const Levels levels(ctx);
  const Hierarchy& hy = levels.hy;
  const std::vector<int>& partners = levels.partners;
  if (ctx.size == 1 || count == 0) {
    if (op == ReduceOp::kAvg && ctx.size > 1) divide(data, count, dtype, ctx.size);
    return;
  }
  const size_t es = dtypeSize(dtype), bytes = count * es;
  char* base = static_cast<char*>(data);
  const ReduceOp inner = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  if (!hy.core()) {  // an extra rank: its partner does its part
    handTo(ctx, hy.partner(), base, bytes, "fold");
    ctx.drainSends();
    takeFrom(ctx, hy.partner(), base, bytes, "unfold");
    return;
  }
  for (int extra : partners) {
    char* theirs = ctx.scratch(bytes);
    takeFrom(ctx, extra, theirs, bytes, "fold");
    reduce(base, base, theirs, count, dtype, inner);
  }

  Context intra(ctx, levels.core, "intra-host");
  Context inter(ctx, levels.rail, "inter-host");
  const int divisor = op == ReduceOp::kAvg ? ctx.size : 1;
  const int slices = pipelineSlices(ctx, bytes);
  const Chunks cut(count, slices);
  // Slice k's intra-host blocks: rail i's chunk of it (this rank's: blocks[hy.local()]).
  auto blocksOf = [&](int k) {
    const Chunks chunks(cut.length(k), hy.rails());
    std::vector<Block> blocks;
    for (int i = 0; i < hy.rails(); ++i) blocks.push_back({{cut.offset(k) + chunks.offset(i), chunks.length(i)}});
    return blocks;
  };
  if (slices == 1) {  // the levels one after the other
    const std::vector<Block> blocks = blocksOf(0);
    const Range mine = blocks[hy.local()][0];
    reduceScatterRingBlocks(intra, base, blocks, base + mine.offset * es, dtype, inner);
    if (compress != Compress::kNone) {
      runCompressedRing(inter, compress, divisor, reinterpret_cast<float*>(base), railShares(mine, hy.hosts()),
                        [&](size_t b) { return ctx.stage(b); });
    } else {
      allreduceRing(inter, base + mine.offset * es, mine.length, dtype, inner);
      if (divisor > 1) divide(base + mine.offset * es, mine.length, dtype, divisor);
    }
    allgatherRingBlocks(intra, base, blocks, nullptr, dtype);
  } else {  // pipelined (rail_pipeline.h): slice k crosses hosts while k+1 and k-1 move within
    const size_t slotBytes = (Chunks(cut.length(0), hy.rails()).length(0) / hy.hosts() + 1) * es;
    std::unique_ptr<SliceRing> ring;
    RailRing* exact = nullptr;
    CompressedRing* compressed = nullptr;
    if (compress == Compress::kNone) {
      ring = std::make_unique<RailRing>(inter, ctx.stage(slotBytes), dtype, inner, divisor);
      exact = static_cast<RailRing*>(ring.get());
    } else {  // slice 0 is the largest: its wire memory serves every slice
      ring = std::make_unique<CompressedRing>(inter, compress, divisor);
      compressed = static_cast<CompressedRing*>(ring.get());
      compressed->setWire(ctx.stage(compressed->wireCapacity(railShares(blocksOf(0)[hy.local()][0], hy.hosts()))));
    }
    SliceRing& rails = *ring;
    intra.setBackground(&rails);
    std::vector<Block> previous;  // slice k-1's blocks, all-gathered once its rails are done
    for (int k = 0; k <= slices; ++k) {
      std::vector<Block> blocks;
      if (k < slices) {
        blocks = blocksOf(k);
        const Range mine = blocks[hy.local()][0];
        reduceScatterRingBlocks(intra, base, blocks, base + mine.offset * es, dtype, inner);
        if (compressed != nullptr) {
          compressed->push(reinterpret_cast<float*>(base), railShares(mine, hy.hosts()));
        } else {
          std::vector<Block> shares;  // the rail ring's: our chunk cut in one share per host
          for (int h = 0; h < hy.hosts(); ++h) shares.push_back(partOf(Block{mine}, h, hy.hosts()));
          exact->push(RailRing::Kind::kAllReduce, base, std::move(shares));
        }
        rails.poll();
      }
      if (k > 0) {
        intra.waitFor([&] { return rails.done(k - 1); },
                      [&] { return "finish the inter-host all-reduce: " + rails.waiting(); }, rails.waitingFor());
        allgatherRingBlocks(intra, base, previous, nullptr, dtype);
      }
      previous = std::move(blocks);
    }
  }

  for (int extra : partners) handTo(ctx, extra, base, bytes, "unfold");
  ctx.drainSends();
}

}  // namespace pycollect
