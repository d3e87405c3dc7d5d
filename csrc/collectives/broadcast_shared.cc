// Shared-memory broadcast, all-gather and barrier, for a group whose ranks all share a
// host (shared_arena.h; allreduce_shared.cc has the idea).
//
// Broadcast: the root copies its buffer into its slot and raises `arrived`; every other
// rank raises its own flag (it writes nothing, but its peers count rounds by it), waits
// for the root's and copies the root's slot out. One copy in, one out per rank, however
// many ranks; no chain of hops. In the last round every rank also waits for all the
// others' flags, which checks every rank's call (shared_arena.h, "Mismatches").
//
// All-gather: each rank copies its input into its slot and raises `arrived`; once every
// peer has, each copies every slot into its place in the output (one buffer, or a list of
// one tensor per rank: list_forms.cc).
//
// Barrier: each rank raises `arrived` and waits until every peer has.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/shared_arena.h"

namespace pycollect {

void broadcastShared(Context& ctx, void* data, size_t bytes, int root) {
  SharedArena* a = ctx.arena();
  if (a == nullptr || !a->ensure(ctx)) return broadcastChain(ctx, data, bytes, root);
  char* buf = static_cast<char*>(data);
  inRounds(ctx, *a, bytes, kArenaPipeBytes, "shared broadcast", [&](uint32_t k, size_t off, size_t n) {
    if (ctx.rank == root) {
      a->put(k, 0, buf + off, n);
      a->arrive(k);
    } else {
      a->arrive(k);
      a->waitArrived(ctx, root, k, "the root's data");
      a->checkAnnounced(ctx.call, root);
      if (n > 0) std::memcpy(buf + off, a->slot(root, k), n);
    }
    if (off + n >= bytes) a->waitAllArrived(ctx, k, "its arrival at the broadcast");
  });
}

namespace {

// The all-gather on the arena, rank p's `count` elements written from place(p) on.
template <class Place>
void allgatherSharedTo(Context& ctx, SharedArena& a, const char* src, size_t count, size_t es, Place place) {
  inRounds(ctx, a, count, kArenaSlotBytes / es, "shared all-gather", [&](uint32_t k, size_t off, size_t n) {
    a.put(k, 0, src + off * es, n * es);
    a.arrive(k);
    a.waitAllArrived(ctx, k, "its all-gather input");
    for (int p = 0; p < ctx.size && n > 0; ++p) {
      char* to = place(p) + off * es;
      const char* from = p == ctx.rank ? src + off * es : a.slot(p, k);
      if (to != from) std::memcpy(to, from, n * es);
    }
  });
}

}  // namespace

void allgatherShared(Context& ctx, const void* in, void* out, size_t count, DType dtype) {
  SharedArena* a = ctx.arena();
  if (a == nullptr || !a->ensure(ctx)) return allgatherRing(ctx, in, out, count, dtype);
  const size_t es = dtypeSize(dtype);
  char* dst = static_cast<char*>(out);
  allgatherSharedTo(ctx, *a, static_cast<const char*>(in), count, es, [&](int p) { return dst + p * count * es; });
}

bool allgatherSharedInto(Context& ctx, Span in, const std::vector<Span>& outs, DType dtype) {
  SharedArena* a = ctx.arena();
  if (a == nullptr || !a->ensure(ctx)) return false;
  allgatherSharedTo(ctx, *a, in.data, in.count, dtypeSize(dtype), [&](int p) { return outs[p].data; });
  return true;
}

void barrierShared(Context& ctx) {
  SharedArena* a = ctx.arena();
  if (a == nullptr || !a->ensure(ctx)) return barrierAll(ctx);
  const uint32_t k = a->nextRound();
  ctx.setStep("shared barrier", 0, 1);
  a->arrive(k);
  a->waitAllArrived(ctx, k, "its arrival at the barrier");
}

}  // namespace pycollect
