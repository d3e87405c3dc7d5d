// Shared-memory gather and scatter, for a group whose ranks all share a host
// (shared_arena.h, "Parts"; allreduce_shared.cc has the idea).
//
// Sizes may differ by rank, as in the direct algorithms (gather_direct.cc): only the root
// knows them all. So every rank runs these at any size (no rank could choose by its own
// size alone), in one round of the arena, and each pair (the root and a rank) picks the way
// of its part from that part's size, which both ends know:
//   - a small part (at most kArenaPartBytes) travels in the arena, right behind the head of
//     the writer's block: one copy in, one copy out, no message;
//   - a larger one travels over the pair's link, sent and received at once (on
//     shared-memory links a large message whose receive is posted is one copy, which beats
//     the arena's two: measured in docs/measurements.md).
// The heads are the direct algorithms' header exchange, through the arena:
//   - each rank other than the root writes its call's header at the head of its slot; the
//     root compares it with what it expects of that rank (its own call with that count);
//   - the root writes, at the head of each rank's block of its own slot, its call with the
//     count it holds for that rank; that rank compares it with its own call.
// Ranks whose calls differ both raise MismatchError naming both calls, before a small part
// is used.
//
// Gather: rank p writes its head (and a small part) and raises `arrived`, then waits for
// the root's flag and checks the root's head for it; a large part it sends at once. The
// root writes its heads, raises its flag, waits for every rank's, checks their heads, copies
// the small parts out of their slots and only then receives the large ones.
//
// Scatter: gather run backwards. The root writes each rank's head and small part into
// that rank's block of its slot, raises `arrived`, sends the large parts, and waits for
// every rank's flag and head; each rank posts the receive of a large part, waits for the
// root's flag, checks its head, and copies its small part out or waits for its large one.
//
// Example, gather of 3 ranks to root 0, ranks 1 and 2 sending 2 elements and 1 MiB: rank 1
// writes its head and 2 elements into its slot, rank 2 its head alone; rank 0 writes its
// heads (rank 1: 2 elements, rank 2: 1 MiB), raises its flag, waits for both, checks their
// heads, copies rank 1's 2 elements into outs[1] and receives rank 2's MiB, which rank 2
// sent as it raised its flag, into outs[2].
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/shared_arena.h"

namespace pycollect {

void gatherShared(Context& ctx, Span in, const std::vector<Span>& outs, DType dtype, int root) {
  SharedArena* a = ctx.arena();
  if (a == nullptr || !a->ensure(ctx)) return gatherDirect(ctx, in, outs, dtype, root);
  // The others' slots: their one block. The root's: a head for each rank.
  const size_t es = dtypeSize(dtype), own = partBlockBytes(1), block = partBlockBytes(ctx.size);
  const uint32_t k = oneRound(ctx, *a, "shared gather");
  if (ctx.rank != root) {
    const bool small = partInBlock(in.count * es, own);
    putHead(ctx, *a, k, 0, in.count);
    if (small) a->put(k, sizeof(WireHeader), in.data, in.count * es);
    a->arrive(k);
    // Sent at once: the root receives it only once the heads agree.
    if (!small) ctx.link(root).postSend(in.data, in.count * es);
    a->waitArrived(ctx, root, k, "the root's head");
    a->checkAnnounced(ctx.call, root);
    checkHead(ctx, *a, k, root, ctx.rank * block, in.count);
    ctx.drainSends();
    return;
  }
  for (int q = 0; q < ctx.size; ++q) putHead(ctx, *a, k, q * block, outs[q].count);
  a->arrive(k);
  a->waitAllArrived(ctx, k, "its gather input");
  std::vector<int> large;
  for (int p = 0; p < ctx.size; ++p) {
    if (p == root) continue;
    checkHead(ctx, *a, k, p, 0, outs[p].count);
    const size_t bytes = outs[p].count * es;
    if (!partInBlock(bytes, own)) {
      large.push_back(p);
    } else if (bytes > 0) {
      std::memcpy(outs[p].data, a->slot(p, k) + sizeof(WireHeader), bytes);
    }
  }
  if (in.count > 0 && outs[root].data != in.data) std::memmove(outs[root].data, in.data, in.count * es);
  if (!large.empty()) ctx.waitRecvs(large, ctx.postRecvs(large, outs, es), "gather");
}

void scatterShared(Context& ctx, const std::vector<Span>& ins, Span out, DType dtype, int root) {
  SharedArena* a = ctx.arena();
  if (a == nullptr || !a->ensure(ctx)) return scatterDirect(ctx, ins, out, dtype, root);
  const size_t es = dtypeSize(dtype), block = partBlockBytes(ctx.size);
  const uint32_t k = oneRound(ctx, *a, "shared scatter");
  if (ctx.rank != root) {
    const bool small = partInBlock(out.count * es, block);
    putHead(ctx, *a, k, 0, out.count);
    // Posted at once, as the direct scatter posts it before the header check: a message
    // whose receive waits for it is copied once on shared-memory links, else twice.
    const uint64_t ticket = small ? 0 : ctx.link(root).postRecv(out.data, out.count * es);
    a->arrive(k);
    a->waitArrived(ctx, root, k, "the root's data");
    a->checkAnnounced(ctx.call, root);
    checkHead(ctx, *a, k, root, ctx.rank * block, out.count);
    if (!small) {
      ctx.setStep("scatter", 0, 1);
      ctx.waitRecv(ctx.link(root), ticket);
    } else if (out.count > 0) {
      std::memcpy(out.data, a->slot(root, k) + ctx.rank * block + sizeof(WireHeader), out.count * es);
    }
    return;
  }
  for (int q = 0; q < ctx.size; ++q) {
    const size_t bytes = ins[q].count * es;
    putHead(ctx, *a, k, q * block, ins[q].count);
    if (q != root && partInBlock(bytes, block)) a->put(k, q * block + sizeof(WireHeader), ins[q].data, bytes);
  }
  a->arrive(k);
  // Sent at once, into the receives the ranks posted as they began.
  for (int q = 0; q < ctx.size; ++q) {
    if (q != root && !partInBlock(ins[q].count * es, block)) ctx.link(q).postSend(ins[q].data, ins[q].count * es);
  }
  a->waitAllArrived(ctx, k, "its arrival at the scatter");
  for (int p = 0; p < ctx.size; ++p) {
    if (p != root) checkHead(ctx, *a, k, p, 0, ins[p].count);
  }
  if (out.count > 0 && ins[root].data != out.data) std::memmove(out.data, ins[root].data, out.count * es);
  ctx.drainSends();
}

}  // namespace pycollect
