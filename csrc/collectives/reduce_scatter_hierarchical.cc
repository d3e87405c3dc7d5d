// Hierarchical reduce-scatter: the mirror of the hierarchical all-gather. Each host
// first reduces among its ranks over shared memory, so that a chunk crosses the
// network once per other host, already summed over its host.
//
// With h hosts of L ranks each (hierarchy.h), `in` holding n chunks of c bytes (S = n c):
//   1. reduce-scatter within each host: local rank i gets the chunks of rail i (those of
//      local rank i of every host), each reduced over its host;
//   2. reduce-scatter across hosts on each rail: each rank gets its own chunk reduced
//      over every rank.
// Each host's cable carries (h-1)/h x S each way, against (n-1)/n x S for the flat ring.
//
// Worked example, hosts [0, 1] [2, 3], every rank holding chunks A B C D:
//   1. rank 0 gets A and C summed over ranks 0 and 1, rank 1 gets B and D; ranks 2 and
//      3 the same over 2 and 3
//   2. rail [0, 2]: rank 0 sends its C to rank 2 and gets rank 2's A: rank 0 holds A
//      summed over all four, rank 2 C; rail [1, 3]: B and D.
//
// With the same ranks on every host, from kPieceSegments segments on, the levels overlap:
// piece k of every chunk crosses the network while the host reduces piece k+1
// (rail_pipeline.h).
//
// Uneven hosts: an extra rank hands its whole input to its partner core rank, which
// reduces it into a copy of its own; the partner's blocks carry its extras' chunks too,
// and it sends each extra its chunk at the end. `in` is never written.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/levels.h"
#include "collectives/rail_pipeline.h"
#include "reduce/reduce.h"

namespace pycollect {

void reduceScatterHierarchical(Context& ctx, const void* in, void* out, size_t count, DType dtype,
                               ReduceOp op) {
  const Levels levels(ctx);
  const Hierarchy& hy = levels.hy;
  const std::vector<int>& partners = levels.partners;
  const size_t es = dtypeSize(dtype), chunk = count * es, total = chunk * ctx.size;
  const char* src = static_cast<const char*>(in);
  if (count == 0) return;
  if (ctx.size == 1) {
    if (out != in) std::memmove(out, in, chunk);
    return;
  }
  if (!hy.core()) {
    handTo(ctx, hy.partner(), src, total, "fold");
    ctx.drainSends();
    takeFrom(ctx, hy.partner(), out, chunk, "unfold");
    return;
  }
  const ReduceOp inner = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  // This rank's block on the intra-host ring (hostBlocks): rail `local`'s chunks of every
  // host, each host's members together; after phase 1 they sit packed in `hostSums`, host
  // by host, and each host's part there is its block on the rail.
  std::vector<Block> railBlocks;
  size_t at = 0;
  for (int h = 0; h < hy.hosts(); ++h) {
    const size_t length = hy.members(h, hy.local()).size() * count;
    railBlocks.push_back({{at, length}});
    at += length;
  }
  const size_t mineCount = hy.members(hy.host(), hy.local()).size() * count;
  // Stage: the input with the extras' folded in (if any), the host sums, ours with our
  // extras'; pipelined, the rails' slot.
  const int pieces = hy.hosts() * hy.rails() == ctx.size ? pipelinePieces(ctx, total) : 1;
  const Chunks cut(count, pieces);
  const size_t folded = partners.empty() ? 0 : total, slot = pieces > 1 ? cut.length(0) * es : 0;
  char* stage = ctx.stage(folded + at * es + (partners.empty() ? 0 : mineCount * es) + slot);
  char* hostSums = stage + folded;
  char* ours = partners.empty() ? static_cast<char*>(out) : hostSums + at * es;
  for (size_t j = 0; j < partners.size(); ++j) {
    char* theirs = ctx.scratch(total);
    takeFrom(ctx, partners[j], theirs, total, "fold");
    reduce(stage, j == 0 ? src : stage, theirs, count * ctx.size, dtype, inner);
  }
  if (!partners.empty()) src = stage;

  Context intra(ctx, levels.core, "intra-host");
  Context inter(ctx, levels.rail, "inter-host");
  if (pieces == 1) {  // the levels one after the other
    reduceScatterRingBlocks(intra, src, hostBlocks(hy, count), hostSums, dtype, inner);
    reduceScatterRingBlocks(inter, hostSums, railBlocks, ours, dtype, inner);
    if (op == ReduceOp::kAvg) divide(ours, mineCount, dtype, ctx.size);
  } else {  // pipelined (rail_pipeline.h): piece k crosses hosts while the host reduces k+1
    // Every host has one rank on our rail: piece k's host sums are h parts of our chunk's
    // piece k, host by host, and sit together in hostSums (piece k at h x its offset).
    const int h = hy.hosts();
    RailRing rails(inter, hostSums + at * es, dtype, inner, op == ReduceOp::kAvg ? ctx.size : 1);
    intra.setBackground(&rails);
    const std::vector<Block> host = hostBlocks(hy, count);
    for (int k = 0; k < pieces; ++k) {
      char* sums = hostSums + h * cut.offset(k) * es;
      reduceScatterRingBlocks(intra, src, partOf(host, k, pieces), sums, dtype, inner);
      std::vector<Block> blocks;
      for (int j = 0; j < h; ++j) blocks.push_back({{h * cut.offset(k) + j * cut.length(k), cut.length(k)}});
      rails.push(RailRing::Kind::kReduceScatter, hostSums, std::move(blocks), ours + cut.offset(k) * es);
      rails.poll();
    }
    intra.waitFor([&] { return rails.done(pieces - 1); },
                  [&] { return "finish the inter-host reduce-scatter: " + rails.waiting(); },
                  rails.waitingFor());
  }

  if (!partners.empty()) {
    std::memcpy(out, ours, chunk);
    for (size_t j = 0; j < partners.size(); ++j) handTo(ctx, partners[j], ours + (j + 1) * chunk, chunk, "unfold");
  }
  ctx.drainSends();
}

}  // namespace pycollect
