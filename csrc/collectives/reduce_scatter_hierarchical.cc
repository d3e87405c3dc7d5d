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
// From 2 x kSliceSegments segments on (pipelineSlices), the levels overlap: slice k of
// every chunk crosses the network while the host reduces slice k+1 (rail_pipeline.h).
//
// Uneven hosts: an extra rank hands its whole input to its partner core rank, which
// reduces it into a copy of its own; the partner's blocks carry its extras' chunks too,
// and it sends each extra its chunk at the end. `in` is never written.
#include <algorithm>
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
  std::vector<size_t> width;  // per host: the chunks its block on our rail carries
  for (int h = 0; h < hy.hosts(); ++h) width.push_back(hy.members(h, hy.local()).size());
  std::vector<Block> railBlocks;
  size_t at = 0;
  for (int h = 0; h < hy.hosts(); ++h) {
    railBlocks.push_back({{at, width[h] * count}});
    at += width[h] * count;
  }
  const size_t mineCount = width[hy.host()] * count;
  const size_t widest = *std::max_element(width.begin(), width.end());
  // Stage: the input with the extras' folded in (if any), the host sums, ours with our
  // extras'; pipelined, ours slice by slice (with extras) and the rails' slot.
  const int slices = pipelineSlices(ctx, total);
  const Chunks cut(count, slices);
  const bool extras = !partners.empty();
  const size_t folded = extras ? total : 0, oursBytes = extras ? mineCount * es : 0;
  const size_t bySliceBytes = extras && slices > 1 ? mineCount * es : 0;
  const size_t slotBytes = slices > 1 ? widest * cut.length(0) * es : 0;
  char* stage = ctx.stage(folded + at * es + oursBytes + bySliceBytes + slotBytes);
  char* hostSums = stage + folded;
  char* ours = extras ? hostSums + at * es : static_cast<char*>(out);
  char* bySlice = extras ? hostSums + at * es + oursBytes : ours;
  char* slot = hostSums + at * es + oursBytes + bySliceBytes;
  for (size_t j = 0; j < partners.size(); ++j) {
    char* theirs = ctx.scratch(total);
    takeFrom(ctx, partners[j], theirs, total, "fold");
    reduce(stage, j == 0 ? src : stage, theirs, count * ctx.size, dtype, inner);
  }
  if (!partners.empty()) src = stage;

  Context intra(ctx, levels.core, "intra-host");
  Context inter(ctx, levels.rail, "inter-host");
  if (slices == 1) {  // the levels one after the other
    reduceScatterRingBlocks(intra, src, hostBlocks(hy, count), hostSums, dtype, inner);
    reduceScatterRingBlocks(inter, hostSums, railBlocks, ours, dtype, inner);
    if (op == ReduceOp::kAvg) divide(ours, mineCount, dtype, ctx.size);
  } else {  // pipelined (rail_pipeline.h): slice k crosses hosts while the host reduces k+1
    // Slice k of every chunk rail `local` carries (M of them, all hosts): the host sums sit
    // together in hostSums from M x its offset, host by host, a host's members' parts back
    // to back, which is that host's block on the rail. Our host's reduction of slice k comes
    // out in the same order, m parts; with extras (m > 1) it goes back into `ours`, chunk
    // by chunk, at the end.
    const size_t M = at / count, m = mineCount / count;
    RailRing rails(inter, slot, dtype, inner, op == ReduceOp::kAvg ? ctx.size : 1);
    intra.setBackground(&rails);
    const std::vector<Block> host = hostBlocks(hy, count);
    for (int k = 0; k < slices; ++k) {
      const size_t offset = cut.offset(k), length = cut.length(k);
      reduceScatterRingBlocks(intra, src, partOf(host, k, slices), hostSums + M * offset * es, dtype, inner);
      std::vector<Block> blocks;
      size_t before = 0;
      for (int h = 0; h < hy.hosts(); ++h) {
        blocks.push_back({{M * offset + before * length, width[h] * length}});
        before += width[h];
      }
      rails.push(RailRing::Kind::kReduceScatter, hostSums, std::move(blocks), bySlice + m * offset * es);
      rails.poll();
    }
    intra.waitFor([&] { return rails.done(slices - 1); },
                  [&] { return "finish the inter-host reduce-scatter: " + rails.waiting(); },
                  rails.waitingFor());
    for (size_t j = 0; extras && j < m; ++j) {
      for (int k = 0; k < slices; ++k) {
        std::memcpy(ours + (j * count + cut.offset(k)) * es, bySlice + (m * cut.offset(k) + j * cut.length(k)) * es,
                    cut.length(k) * es);
      }
    }
  }

  if (!partners.empty()) {
    std::memcpy(out, ours, chunk);
    for (size_t j = 0; j < partners.size(); ++j) handTo(ctx, partners[j], ours + (j + 1) * chunk, chunk, "unfold");
  }
  ctx.drainSends();
}

}  // namespace pycollect
