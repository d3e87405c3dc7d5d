// Shared-memory reduce-scatter and reduce, for a group whose ranks all share a host
// (shared_arena.h; allreduce_shared.cc has the idea).
//
// Reduce-scatter: each rank copies its whole input into its slot and raises `arrived`;
// rank r then reduces chunk r of every slot, in rank order, into its output. Each result
// is computed once, by the rank that keeps it. A call whose input is larger than a slot
// runs in rounds, each taking the same piece of every chunk.
//
// Reduce: each rank copies its input into its slot and raises `arrived`; the root
// reduces the slots in rank order into its buffer. Every rank waits for all the flags
// (which checks every rank's call: shared_arena.h, "Mismatches"); only the root reduces.
// A round larger than kOnePhaseBytes runs as the all-reduce's pipeline of pieces instead
// (allreduce_shared.cc), each rank reducing its chunk of every piece and the root copying
// the chunks out: the reductions split among the ranks, where one rank alone did them all
// (2 ranks, 64 MiB, the arena forced: 11.6-14.9 ms, where the root alone took 21.7-21.9).
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/shared_arena.h"
#include "reduce/reduce.h"

namespace pycollect {

void reduceScatterShared(Context& ctx, const void* in, void* out, size_t count, DType dtype, ReduceOp op) {
  SharedArena* a = ctx.arena();
  if (a == nullptr || !a->ensure(ctx)) return reduceScatterRing(ctx, in, out, count, dtype, op);
  const size_t es = dtypeSize(dtype);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  // Each round takes the same piece of every chunk (of count elements): size pieces a slot.
  inRounds(ctx, *a, count, kArenaSlotBytes / es / ctx.size, "shared reduce-scatter", [&](uint32_t k, size_t off, size_t n) {
    for (int c = 0; c < ctx.size; ++c) a->put(k, c * n * es, src + (c * count + off) * es, n * es);
    a->arrive(k);
    a->waitAllArrived(ctx, k, "its reduce-scatter input");
    reduceSlots(*a, ctx.size, k, ctx.rank * n * es, n, dtype, op, dst + off * es);
  });
}

void reduceShared(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op, int root) {
  SharedArena* a = ctx.arena();
  if (a == nullptr || !a->ensure(ctx)) return reduceChain(ctx, data, count, dtype, op, root);
  const size_t es = dtypeSize(dtype);
  char* buf = static_cast<char*>(data);
  inRounds(ctx, *a, count, kArenaSlotBytes / es, "shared reduce", [&](uint32_t k, size_t off, size_t n) {
    if (n * es > kOnePhaseBytes) return pipelinedRound(ctx, *a, k, buf + off * es, n, dtype, op, root);
    a->put(k, 0, buf + off * es, n * es);
    a->arrive(k);
    a->waitAllArrived(ctx, k, "its reduce input");
    if (ctx.rank != root) return;
    reduceSlots(*a, ctx.size, k, 0, n, dtype, op, buf + off * es);
  });
}

}  // namespace pycollect
