// Shared-memory all-to-all, list form, for a group whose ranks all share a host
// (shared_arena.h, "Parts"; gather_shared.cc has the same idea with one root).
//
// Rank r sends ins[p] to rank p and receives rank p's ins[r] into outs[p]; sizes may
// differ per pair, and only the pair's ends know each, so every rank runs this at any size,
// in one round of the arena. Rank r's slot holds a block for each reader p: a head (r's call
// with ins[p]'s count) and, where ins[p] is small, ins[p] itself behind it. A larger part
// travels over the pair's link, its send and its receive posted at once (a shared-memory
// link copies a message whose receive is posted once). Then each rank raises `arrived`,
// waits for every peer's, checks each peer's head for it against outs[p]'s size (a pair
// that disagrees raises MismatchError on both ends, before a small part is used), copies
// the small parts out of the peers' slots and waits for the large ones.
//
// Example with 2 ranks: rank 0 sends 3 elements to rank 1 and rank 1 sends 1 MiB to rank 0.
// Rank 0 writes its head and the 3 elements into rank 1's block of its slot and posts the
// receive of rank 1's MiB; rank 1 writes its head alone into rank 0's block and sends the
// MiB. Each waits for the other's flag, checks the other's head, and rank 1 copies the 3
// elements out while rank 0 waits for its message.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/shared_arena.h"

namespace pycollect {

void alltoallShared(Context& ctx, const std::vector<Span>& ins, const std::vector<Span>& outs, DType dtype) {
  SharedArena* a = ctx.arena();
  if (a == nullptr || !a->ensure(ctx)) return alltoallDirect(ctx, ins, outs, dtype);
  const size_t es = dtypeSize(dtype), block = partBlockBytes(ctx.size);
  const int me = ctx.rank, n = ctx.size;
  const uint32_t k = oneRound(ctx, *a, "shared all-to-all");
  std::vector<int> large;  // peers whose part to this rank comes over the link
  for (int j = 1; j < n; ++j) {
    const int p = (me + j) % n;  // ring order from this rank, as the direct algorithm's
    const size_t bytes = ins[p].count * es;
    putHead(ctx, *a, k, p * block, ins[p].count);
    if (partInBlock(bytes, block)) a->put(k, p * block + sizeof(WireHeader), ins[p].data, bytes);
    if (!partInBlock(outs[p].count * es, block)) large.push_back(p);
  }
  const std::vector<uint64_t> tickets = ctx.postRecvs(large, outs, es);
  a->arrive(k);
  for (int j = 1; j < n; ++j) {
    const int p = (me + j) % n;
    if (!partInBlock(ins[p].count * es, block)) ctx.link(p).postSend(ins[p].data, ins[p].count * es);
  }
  const Span own = ins[me];
  if (own.count > 0 && own.data != outs[me].data) std::memmove(outs[me].data, own.data, own.count * es);
  a->waitAllArrived(ctx, k, "its all-to-all parts");
  for (int j = 1; j < n; ++j) {
    const int p = (me + j) % n;
    checkHead(ctx, *a, k, p, me * block, outs[p].count);
    const size_t bytes = outs[p].count * es;
    if (bytes > 0 && partInBlock(bytes, block)) {
      std::memcpy(outs[p].data, a->slot(p, k) + me * block + sizeof(WireHeader), bytes);
    }
  }
  if (!large.empty()) ctx.waitRecvs(large, tickets, "exchange");
  ctx.drainSends();
}

}  // namespace pycollect
