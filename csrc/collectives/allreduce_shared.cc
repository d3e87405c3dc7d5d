// Shared-memory all-reduce, for a group whose ranks all share a host (shared_arena.h).
//
// No message crosses a link. Each rank copies its input into its slot of the group's
// arena and raises its `arrived` flag; every peer's data is then in memory it can read.
//   - Small pieces (up to kOnePhaseBytes): every rank reduces all the slots itself, in
//     rank order, x0 op x1 op ... op x(n-1), straight into its output. One flag per rank
//     per call: the whole cost of an 8-byte call is a copy, a store, the peers' stores
//     seen, and a reduction.
//   - Larger pieces, in two phases: rank r reduces only chunk r of every slot (in rank
//     order, into its own output), writes the result back into chunk r of its slot and
//     raises `reduced`; then every rank copies chunk p from rank p's slot. Each rank reads
//     its share once instead of everything: the reduction work is spread over the ranks
//     as the ring's is, without the ring's size-1 steps.
// Every chunk is reduced by one rank, in one order, and copied by the others: the result
// is the same to the bit on every rank. A call larger than the arena's slot runs as
// several rounds; consecutive rounds use the slot's two parities, so a rank fills the next
// round while its peers still read this one.
//
// Example, 2 ranks, 8 bytes: rank 0 copies x0 into its slot, raises arrived = k, sees rank
// 1's arrived = k, and computes x0 + x1 from the two slots; rank 1 does the same.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/shared_arena.h"
#include "reduce/reduce.h"

namespace pycollect {
namespace {

constexpr size_t kOnePhaseBytes = 32 << 10;

}  // namespace

Algo linkAllreduce(int size, size_t bytes) {
  return size <= 8 && bytes <= (16 << 10) ? Algo::kDirect : Algo::kRing;
}

void reduceSlots(const SharedArena& a, int size, uint32_t round, size_t offset, size_t count, DType dtype,
                 ReduceOp op, void* dst) {
  if (count == 0) return;
  if (size == 1) {
    std::memcpy(dst, a.slot(0, round) + offset, count * dtypeSize(dtype));
    return;
  }
  reduce(dst, a.slot(0, round) + offset, a.slot(1, round) + offset, count, dtype, op);
  for (int p = 2; p < size; ++p) reduce(dst, dst, a.slot(p, round) + offset, count, dtype, op);
  if (op == ReduceOp::kAvg) divide(dst, count, dtype, size);
}

void allreduceShared(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  SharedArena* a = ctx.arena();
  if (a == nullptr || !a->ensure(ctx)) return allreduceWith(linkAllreduce(ctx.size, count * dtypeSize(dtype)),
                                                            ctx, data, count, dtype, op);
  const size_t es = dtypeSize(dtype);
  char* out = static_cast<char*>(data);
  inRounds(ctx, *a, count, kArenaSlotBytes / es, "shared all-reduce", [&](uint32_t k, size_t off, size_t n) {
    a->put(k, 0, out + off * es, n * es);
    a->arrive(k);
    a->waitAllArrived(ctx, k, "its all-reduce input");
    if (n * es <= kOnePhaseBytes) {
      reduceSlots(*a, ctx.size, k, 0, n, dtype, op, out + off * es);
      return;
    }
    Chunks chunks(n, ctx.size);
    const size_t o = chunks.offset(ctx.rank), len = chunks.length(ctx.rank);
    char* result = out + (off + o) * es;
    reduceSlots(*a, ctx.size, k, o * es, len, dtype, op, result);
    a->put(k, o * es, result, len * es);
    a->reduced(k);
    for (int p = 0; p < ctx.size; ++p) {
      if (p == ctx.rank) continue;
      a->waitReduced(ctx, p, k, "its share of the all-reduce");
      const size_t po = chunks.offset(p);
      std::memcpy(out + (off + po) * es, a->slot(p, k) + po * es, chunks.length(p) * es);
    }
  });
}

}  // namespace pycollect
