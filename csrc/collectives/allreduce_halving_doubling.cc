// Recursive halving-doubling all-reduce (Rabenseifner): a reduce-scatter by recursive
// halving followed by an all-gather by recursive doubling, in log2(p') steps each
// instead of the ring's p-1, for the same bytes on the wire.
//
// p = size ranks, p' = the largest power of two <= p, rem = p - p'.
// Fold (only when rem > 0): among the first 2*rem ranks, each even rank sends its whole
//   vector to the odd rank above it, which reduces it into its own (odd = odd op even);
//   the even ranks then sit out until the unfold. The p' survivors are renumbered
//   vrank = rank / 2 (odd ranks below 2*rem) or rank - rem (the ranks above).
// Reduce-scatter (recursive halving), the vector cut into p' blocks, steps k = 0 ..
//   log2(p')-1 with mask = p'/2, p'/4, .. 1: vrank exchanges with partner vrank ^ mask.
//   Its current range of blocks is halved: the half whose blocks have bit `mask` equal
//   to vrank's is kept, the other half is sent to the partner, and the partner's copy
//   of the kept half is received and reduced into ours (ours op theirs). After the
//   last step vrank holds block vrank, reduced over all p ranks (AVG divides it by p
//   here, once).
// All-gather (recursive doubling), the mirror: mask = 1, 2, .. p'/2, each survivor
//   swaps its whole current range with partner vrank ^ mask; the range doubles.
// Unfold (rem > 0): each odd rank below 2*rem sends the result to the even one below.
//
// Example with 6 ranks (p' = 4, rem = 2), vectors x0..x5 cut into blocks A B C D:
//   fold:  0 sends x0 to 1 (holds x1+x0), 2 sends x2 to 3 (holds x3+x2); survivors
//          1 3 4 5 are vranks 0 1 2 3.
//   RS k=0 (mask 2): vrank 0 (rank 1) <-> vrank 2 (rank 4): rank 1 keeps AB and sends CD,
//          rank 4 keeps CD; rank 3 <-> rank 5 likewise. Rank 1's AB = (x1+x0)+x4.
//   RS k=1 (mask 1): rank 1 <-> rank 3: rank 1 keeps A = ((x1+x0)+x4)+((x3+x2)+x5),
//          rank 3 keeps B; rank 4 keeps C, rank 5 keeps D.
//   AG k=0 (mask 1): 1 <-> 3 swap A and B, 4 <-> 5 swap C and D.
//   AG k=1 (mask 2): 1 <-> 4 swap AB and CD, 3 <-> 5 likewise: every survivor holds ABCD.
//   unfold: 1 sends ABCD to 0, 3 sends it to 2.
// Every block is reduced by exactly one rank and then only copied, so every rank ends
// with bit-identical bytes.
//
// Cost (n = bytes per rank, alpha per message, beta per byte on the wire, gamma per
// byte reduced):
//   [rem > 0: alpha + n*beta + n*gamma]                          fold
//   + log2(p')*alpha + (p'-1)/p' * n*beta + (p'-1)/p' * n*gamma     reduce-scatter
//   + log2(p')*alpha + (p'-1)/p' * n*beta                          all-gather
//   + [rem > 0: alpha + n*beta]                                    unfold
// Each received message (fold, or a reduce-scatter step of m bytes) arrives in
// segments of tunables.segmentBytes (s) that are reduced while the next ones are on
// the wire, so a message of m bytes costs alpha + max(beta, gamma)*m +
// min(beta, gamma)*min(m, s) rather than alpha + m*(beta + gamma): with segments
// the gamma terms above shrink to one segment's worth per step when gamma <= beta.
// Plus, as every algorithm, one header exchange (about one alpha) before the first step.
#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/peers.h"
#include "collectives/recv_reduce.h"
#include "reduce/reduce.h"

namespace pycollect {

void allreduceHalvingDoubling(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  const int p = ctx.size;
  const int rank = ctx.rank;
  int pp = 1;
  while (pp * 2 <= p) pp *= 2;
  const int rem = p - pp;
  const bool folded = rank < 2 * rem;                          // takes part in fold/unfold
  const int vrank = folded ? (rank % 2 == 1 ? rank / 2 : -1) : rank - rem;  // -1: sits out
  auto real = [rem](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  int steps = 0;
  while ((1 << steps) < pp) ++steps;

  std::vector<int> partners;
  if (folded) partners.push_back(rank ^ 1);
  if (vrank >= 0) {
    for (int mask = pp / 2; mask >= 1; mask /= 2) partners.push_back(real(vrank ^ mask));
  }
  ctx.exchangeHeaders(headerPeers(ctx.ringPeers(), partners, rank));
  if (p == 1 || count == 0) return;

  const size_t es = dtypeSize(dtype);
  char* base = static_cast<char*>(data);
  const size_t bytes = count * es;
  // Every send goes in pipelining segments, the units the receiver reduces (recvReduce).
  // On shared memory a segment then goes through the ring where each rank has a core,
  // where a whole half-vector would be read from our memory (transport/shm/link.h says
  // which is faster when).
  const Segments segs = pipelineSegments(ctx, count, es);
  auto sendRange = [&](Link& l, size_t from, size_t elems) {
    for (size_t j = 0; j < segs.count && segs.size(j, elems) > 0; ++j) {
      l.postSend(base + (from + segs.begin(j, elems)) * es, segs.size(j, elems) * es);
    }
  };

  // Fold: the even rank's vector goes up; it then waits for the result (unfold).
  if (folded) {
    Link& pair = ctx.link(rank ^ 1);
    ctx.setStep("fold", 0, 1);
    if (vrank < 0) {
      sendRange(pair, 0, count);
      // The result arrives only after the odd rank received all of our vector, so our
      // send of `base` has left before the receive writes into it.
      uint64_t t = pair.postRecv(base, bytes);
      ctx.setStep("unfold", 0, 1);
      ctx.waitRecv(pair, t);
      ctx.drainSends();
      return;
    }
  }
  // Room for the receive slots of the largest message (at most the whole vector).
  char* scratch = ctx.scratch(recvReduceScratch(ctx, count, dtype));
  if (folded) recvReduce(ctx, ctx.link(rank ^ 1), base, count, dtype, op, scratch);

  Chunks blocks(count, pp);
  // Element range of blocks [lo, hi).
  auto first = [&](int lo) { return blocks.offset(lo); };
  auto length = [&](int lo, int hi) { return blocks.offset(hi) - blocks.offset(lo); };
  auto sendBlocks = [&](Link& l, int lo, int hi) {
    sendRange(l, first(lo), length(lo, hi));
  };

  // Reduce-scatter by recursive halving: distance p'/2 first.
  int lo = 0, hi = pp;
  int k = 0;
  for (int mask = pp / 2; mask >= 1; mask /= 2, ++k) {
    Link& partner = ctx.link(real(vrank ^ mask));
    const int mid = lo + (hi - lo) / 2;
    const bool upper = (vrank & mask) != 0;
    const int keepLo = upper ? mid : lo, keepHi = upper ? hi : mid;
    ctx.setStep("reduce-scatter", k, steps);
    sendBlocks(partner, upper ? lo : mid, upper ? mid : hi);
    recvReduce(ctx, partner, base + first(keepLo) * es, length(keepLo, keepHi), dtype, op, scratch);
    lo = keepLo;
    hi = keepHi;
  }
  if (op == ReduceOp::kAvg) divide(base + first(lo) * es, length(lo, hi), dtype, p);

  // All-gather by recursive doubling: distance 1 first. The partner's range lands
  // where we sent it our half during the reduce-scatter; the partner sends it only
  // after it received that half, so our send has left before the receive writes.
  k = 0;
  for (int mask = 1; mask < pp; mask *= 2, ++k) {
    Link& partner = ctx.link(real(vrank ^ mask));
    const bool upper = (vrank & mask) != 0;
    const int theirLo = upper ? lo - mask : hi, theirHi = upper ? lo : hi + mask;
    ctx.setStep("all-gather", k, steps);
    uint64_t t = 0;
    const size_t theirs = length(theirLo, theirHi);
    if (theirs > 0) t = partner.postRecv(base + first(theirLo) * es, theirs * es);
    sendBlocks(partner, lo, hi);
    if (theirs > 0) ctx.waitRecv(partner, t);
    lo = std::min(lo, theirLo);
    hi = std::max(hi, theirHi);
  }

  // Unfold: the result goes back down to the even rank that sat out.
  if (folded) {
    ctx.setStep("unfold", 0, 1);
    sendRange(ctx.link(rank ^ 1), 0, count);
  }
  ctx.drainSends();
}

}  // namespace pycollect
