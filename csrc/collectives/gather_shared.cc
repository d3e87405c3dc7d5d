// Shared-memory gather and scatter, for a group whose ranks all share a host
// (shared_arena.h; allreduce_shared.cc has the idea).
//
// Sizes may differ by rank, as in the direct algorithms (gather_direct.cc): only the root
// knows them all. So every rank runs these at any size (no rank could choose by its own
// size alone), in one round of the arena, and each pair (the root and a rank) picks the way
// of its own part from that part's size, which both ends know:
//   - a small part (at most kSlotPart) travels in the arena, right behind the head of the
//     sender's block: one copy in, one copy out, no message;
//   - a larger one travels over the pair's link, sent and received at once (on
//     shared-memory links a large message whose receive is posted is one copy, which beats
//     the arena's two: measured in docs/measurements.md).
// The heads are the direct algorithms' header exchange, through the arena:
//   - each rank other than the root writes its call's header at the head of its slot; the
//     root compares it with what it expects of that rank (its own call with that count);
//   - the root writes, at the head of each rank's block of its own slot, its call with the
//     count it holds for that rank; that rank compares it with its own call.
// Ranks whose calls differ both raise MismatchError naming both calls, before any part is
// used or sent.
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
#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/shared_arena.h"

namespace pycollect {
namespace {

// A part of at most this many bytes travels in the arena; a larger one over its link.
constexpr size_t kSlotPart = 8 << 10;

// A call's header at the head of a block, with the count the writer has for the reader.
WireHeader headOf(const Context& ctx, size_t count) {
  WireHeader h = ctx.call;
  h.count = count;
  h.rank = ctx.rank;
  return h;
}

// The root's slot: a block a rank, its head then its small part (the scatter's; the
// gather's blocks hold heads alone). Fewer bytes where many ranks share the slot.
size_t blockBytes(int size) {
  return std::min<size_t>((sizeof(WireHeader) + kSlotPart + 63) / 64 * 64, kArenaSlotBytes / size / 64 * 64);
}

// Whether a part of `bytes` travels in a block of `block` bytes (else over the link).
bool inSlot(size_t bytes, size_t block) { return bytes <= std::min(kSlotPart, block - sizeof(WireHeader)); }

// The root: its heads, one at the start of each rank's block, with the count it holds for it.
void putHeads(Context& ctx, SharedArena& a, uint32_t k, const std::vector<Span>& parts, size_t block) {
  for (int q = 0; q < ctx.size; ++q) {
    const WireHeader h = headOf(ctx, parts[q].count);
    a.put(k, q * block, &h, sizeof(h));
  }
}

// A rank other than the root, once the root arrived at round `k`: the root's head for it
// against its own call.
void checkRootHead(Context& ctx, const SharedArena& a, uint32_t k, int root, size_t block) {
  WireHeader theirs;
  std::memcpy(&theirs, a.slot(root, k) + ctx.rank * block, sizeof(theirs));
  checkPeerHeader(ctx.call, theirs, ctx.rank, root);
}

// The root, once every rank arrived at round `k`: each rank's head (at its slot's start)
// against the root's call with the count it holds for that rank.
void checkHeads(Context& ctx, const SharedArena& a, uint32_t k, const std::vector<Span>& parts, int root) {
  for (int p = 0; p < ctx.size; ++p) {
    if (p == root) continue;
    WireHeader want = ctx.call, theirs;
    want.count = parts[p].count;
    std::memcpy(&theirs, a.slot(p, k), sizeof(theirs));
    checkPeerHeader(want, theirs, ctx.rank, p);
  }
}

// The call's one round, once the peers are done with the slot's last use.
uint32_t beginRound(Context& ctx, SharedArena& a, const char* phase) {
  const uint32_t k = a.nextRound();
  ctx.setStep(phase, 0, 1);
  a.waitSlotFree(ctx, k);
  return k;
}

}  // namespace

void gatherShared(Context& ctx, Span in, const std::vector<Span>& outs, DType dtype, int root) {
  SharedArena* a = ctx.arena();
  if (a == nullptr || !a->ensure(ctx)) return gatherDirect(ctx, in, outs, dtype, root);
  const size_t es = dtypeSize(dtype), block = sizeof(WireHeader);  // the root's blocks: heads alone
  const size_t slotPart = kArenaSlotBytes - sizeof(WireHeader);    // a non-root's slot: its head and part
  const uint32_t k = beginRound(ctx, *a, "shared gather");
  if (ctx.rank != root) {
    const WireHeader h = headOf(ctx, in.count);
    const bool small = inSlot(in.count * es, slotPart);
    a->put(k, 0, &h, sizeof(h));
    if (small) a->put(k, sizeof(h), in.data, in.count * es);
    a->arrive(k);
    // Sent at once: the root receives it only once the heads agree.
    if (!small) ctx.link(root).postSend(in.data, in.count * es);
    a->waitArrived(ctx, root, k, "the root's head");
    a->checkAnnounced(ctx.call, root);
    checkRootHead(ctx, *a, k, root, block);
    ctx.drainSends();
    return;
  }
  putHeads(ctx, *a, k, outs, block);
  a->arrive(k);
  a->waitAllArrived(ctx, k, "its gather input");
  checkHeads(ctx, *a, k, outs, root);
  std::vector<int> large;
  for (int p = 0; p < ctx.size; ++p) {
    if (p == root) continue;
    const size_t bytes = outs[p].count * es;
    if (!inSlot(bytes, slotPart)) {
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
  const size_t es = dtypeSize(dtype), block = blockBytes(ctx.size);
  const uint32_t k = beginRound(ctx, *a, "shared scatter");
  if (ctx.rank != root) {
    const WireHeader h = headOf(ctx, out.count);
    const bool small = inSlot(out.count * es, block);
    a->put(k, 0, &h, sizeof(h));
    // Posted at once, as the direct scatter posts it before the header check: a message
    // whose receive waits for it is copied once on shared-memory links, else twice.
    const uint64_t ticket = small ? 0 : ctx.link(root).postRecv(out.data, out.count * es);
    a->arrive(k);
    a->waitArrived(ctx, root, k, "the root's data");
    a->checkAnnounced(ctx.call, root);
    checkRootHead(ctx, *a, k, root, block);
    if (!small) {
      ctx.setStep("scatter", 0, 1);
      ctx.waitRecv(ctx.link(root), ticket);
    } else if (out.count > 0) {
      std::memcpy(out.data, a->slot(root, k) + ctx.rank * block + sizeof(WireHeader), out.count * es);
    }
    return;
  }
  putHeads(ctx, *a, k, ins, block);
  for (int q = 0; q < ctx.size; ++q) {
    const size_t bytes = ins[q].count * es;
    if (q != root && inSlot(bytes, block)) a->put(k, q * block + sizeof(WireHeader), ins[q].data, bytes);
  }
  a->arrive(k);
  // Sent at once: each rank receives its part only once the heads agree.
  for (int q = 0; q < ctx.size; ++q) {
    if (q != root && !inSlot(ins[q].count * es, block)) ctx.link(q).postSend(ins[q].data, ins[q].count * es);
  }
  a->waitAllArrived(ctx, k, "its arrival at the scatter");
  checkHeads(ctx, *a, k, ins, root);
  if (out.count > 0 && ins[root].data != out.data) std::memmove(out.data, ins[root].data, out.count * es);
  ctx.drainSends();
}

}  // namespace pycollect
