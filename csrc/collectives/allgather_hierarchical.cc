// Hierarchical all-gather: each rank's chunk crosses the network once per other host,
// on its rail, and is passed on within each host over shared memory.
//
// With h hosts of L ranks each (hierarchy.h), each rank holding a chunk of c bytes
// (S = n c gathered):
//   1. all-gather across hosts on each rail: local rank i gathers the chunks of rail i
//      (local rank i of every host) into their places in the output;
//   2. all-gather within each host: local rank i passes on rail i's h chunks; every
//      rank holds all n.
// Each host's cable carries (h-1)/h x S each way (its L chunks to each of h-1 hosts),
// where the flat ring carries (n-1)/n x S over every cable it crosses.
//
// Worked example, hosts [0, 1] [2, 3] holding A B C D:
//   1. rail [0, 2]: ranks 0 and 2 hold A . C .; rail [1, 3]: ranks 1 and 3 hold . B . D
//   2. ranks 0 and 1 swap their pairs, ranks 2 and 3 too: every rank holds A B C D.
//
// From 2 x kSliceSegments segments on (pipelineSlices), the levels overlap: the host
// passes on slice k of every chunk while slice k+1 crosses the network (rail_pipeline.h).
//
// Uneven hosts: an extra rank hands its chunk to its partner core rank, whose rail
// block then carries both (Hierarchy::members), and receives the whole output at the
// end. Chunks land in their ranks' slots wherever the hosts' ranks are numbered.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/levels.h"
#include "collectives/rail_pipeline.h"

namespace pycollect {

void allgatherHierarchical(Context& ctx, const void* in, void* out, size_t count, DType dtype) {
  const Levels levels(ctx);
  const Hierarchy& hy = levels.hy;
  const std::vector<int>& partners = levels.partners;
  const size_t es = dtypeSize(dtype), chunk = count * es, total = chunk * ctx.size;
  char* base = static_cast<char*>(out);
  char* own = base + ctx.rank * chunk;
  if (own != in && chunk > 0) std::memmove(own, in, chunk);
  if (ctx.size == 1 || count == 0) return;
  if (!hy.core()) {
    handTo(ctx, hy.partner(), own, chunk, "fold");
    ctx.drainSends();
    takeFrom(ctx, hy.partner(), base, total, "unfold");
    return;
  }
  for (int extra : partners) takeFrom(ctx, extra, base + extra * chunk, chunk, "fold");

  std::vector<Block> railBlocks;
  for (int h = 0; h < hy.hosts(); ++h) railBlocks.push_back(slotsOf(hy.members(h, hy.local()), count));
  Context inter(ctx, levels.rail, "inter-host");
  Context intra(ctx, levels.core, "intra-host");
  const std::vector<Block> host = hostBlocks(hy, count);
  const int slices = pipelineSlices(ctx, total);
  if (slices == 1) {  // the levels one after the other
    allgatherRingBlocks(inter, base, railBlocks, nullptr, dtype);
    allgatherRingBlocks(intra, base, host, nullptr, dtype);
  } else {  // pipelined (rail_pipeline.h): the host passes on slice k while k+1 crosses hosts
    RailRing rails(inter, nullptr, dtype, ReduceOp::kSum, 1);
    intra.setBackground(&rails);
    for (int k = 0; k < slices; ++k) rails.push(RailRing::Kind::kAllGather, base, partOf(railBlocks, k, slices));
    for (int k = 0; k < slices; ++k) {
      intra.waitFor([&] { return rails.done(k); },
                    [&] { return "finish the inter-host all-gather: " + rails.waiting(); }, rails.waitingFor());
      allgatherRingBlocks(intra, base, partOf(host, k, slices), nullptr, dtype);
    }
  }

  for (int extra : partners) handTo(ctx, extra, base, total, "unfold");
  ctx.drainSends();
}

}  // namespace pycollect
