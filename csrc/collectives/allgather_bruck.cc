// Bruck all-gather: ceil(log2 p) steps instead of the ring's p-1, each rank sending
// every block it has gathered so far, so the data doubles at every step.
//
// `out` is `size` blocks of `count` elements. Think of rank r's blocks rotated so that
// its own comes first: tmp[i] = the block of rank (r + i) mod p. At step k (distance
// d = 2^k) rank r sends its first m = min(d, p - d) blocks tmp[0 .. m) to rank r - d
// and receives as many from rank r + d, which are that rank's tmp[0 .. m) = our
// tmp[d .. d + m). After the last step tmp[0 .. p) is complete. The classic algorithm
// then rotates tmp into `out` with a local copy; here tmp[i] simply lives at
// out[(r + i) mod p], so a range of tmp is at most two ranges of `out` and no
// rotation copy is needed: the only local copy is our own input into out[r].
//
// Example with 5 ranks holding A (rank 0) .. E (rank 4), seen from rank 0:
//   step 0 (d 1, m 1): 0 sends A to 4, receives B from 1          -> tmp = A B
//   step 1 (d 2, m 2): 0 sends A B to 3, receives C D from 2       -> tmp = A B C D
//   step 2 (d 4, m 1): 0 sends A to 1 (= 0 - 4), receives E from 4 -> tmp = A B C D E
// Rank 0's tmp is already out's order; rank 2's tmp C D E A B lands at out[2, 3, 4, 0, 1].
// The received blocks are copies of every rank's own input, so all ranks are identical.
//
// Cost (N = p * count * element size, the total output bytes; alpha per message, beta
// per byte on the wire): ceil(log2 p) * alpha + (p-1)/p * N * beta, plus the copy of
// our own block (N/p bytes) when not in place, and, as every algorithm, one header
// exchange (about one alpha). Round 0's block goes in segments (see below); a later
// step's blocks go as one message (two when the range wraps around the end of `out`).
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/peers.h"

namespace pycollect {

void allgatherBruck(Context& ctx, const void* in, void* out, size_t count, DType dtype) {
  const int p = ctx.size;
  const int r = ctx.rank;
  std::vector<int> partners;
  for (int d = 1; d < p; d *= 2) {
    partners.push_back((r - d + p) % p);
    partners.push_back((r + d) % p);
  }
  ctx.exchangeHeaders(headerPeers(ctx.ringPeers(), partners, r));
  const size_t chunkBytes = count * dtypeSize(dtype);
  char* base = static_cast<char*>(out);
  const char* src = static_cast<const char*>(in);
  // Our own block goes into out[r] (memmove: `in` may overlap `out`), not before the
  // first round: round 0 moves one block each way, sent from `in` and cut into segments
  // as the ring's are, and after each received segment we copy the same segment of our
  // own block while the peer reads our next one. Copying the block first held the
  // peer's read back by the whole copy, and copying it after the round read `in` from
  // DRAM again (docs/measurements.md, "Bruck all-gather").
  const size_t es = dtypeSize(dtype);
  const bool copyOwn = src != base + r * chunkBytes && chunkBytes > 0;
  if (p == 1 || count == 0) {
    if (copyOwn) std::memmove(base + r * chunkBytes, src, chunkBytes);
    return;
  }
  Segments segs = pipelineSegments(ctx, count, es);
  auto segOffset = [&](size_t j) { return segs.begin(j, count) * es; };
  auto segBytes = [&](size_t j) { return segs.size(j, count) * es; };

  // Calls fn(block, blocks) for the one or two ranges of `out` holding tmp[i .. i + m).
  auto ranges = [&](int i, int m, auto fn) {
    const int start = (r + i) % p;
    const int head = std::min(m, p - start);
    fn(start, head);
    if (m > head) fn(0, m - head);
  };
  std::vector<std::pair<int, int>> plan;  // per step: (distance, blocks)
  for (int d = 1; d < p; d *= 2) plan.emplace_back(d, std::min(d, p - d));
  const int steps = static_cast<int>(plan.size());

  // Every receive goes to its final place, so all of them are posted now (a peer met
  // at two steps sends them in step order, as the link keeps them). Round 0's one
  // block, from rank r + 1, comes in segments.
  std::vector<std::vector<uint64_t>> tickets(steps);
  Link& next = ctx.link((r + 1) % p);
  char* nextBlock = base + ((r + 1) % p) * chunkBytes;
  for (size_t j = 0; j < segs.count; ++j) {
    ctx.setUnit("all-gather", 0, (r + 1) % p, j);
    tickets[0].push_back(next.postRecv(nextBlock + segOffset(j), segBytes(j)));
  }
  for (int k = 1; k < steps; ++k) {
    auto [d, m] = plan[k];
    Link& from = ctx.link((r + d) % p);
    ctx.setStep("all-gather", k, steps);
    ranges(d, m, [&](int b, int nb) {
      tickets[k].push_back(from.postRecv(base + b * chunkBytes, nb * chunkBytes));
    });
  }
  Link& prev = ctx.link((r - 1 + p) % p);
  for (size_t j = 0; j < segs.count; ++j) {
    ctx.setUnit("all-gather", 0, r, j);
    prev.postSend(src + segOffset(j), segBytes(j));
  }
  ctx.setStep("all-gather", 0, steps);
  for (size_t j = 0; j < segs.count; ++j) {
    ctx.waitRecv(next, tickets[0][j]);
    if (copyOwn) std::memmove(base + r * chunkBytes + segOffset(j), src + segOffset(j), segBytes(j));
  }
  for (int k = 1; k < steps; ++k) {
    auto [d, m] = plan[k];
    ctx.setStep("all-gather", k, steps);
    // tmp[0 .. m) is complete: blocks received up to step k-1 (waited for below).
    Link& to = ctx.link((r - d + p) % p);
    ranges(0, m, [&](int b, int nb) { to.postSend(base + b * chunkBytes, nb * chunkBytes); });
    Link& from = ctx.link((r + d) % p);
    for (uint64_t t : tickets[k]) ctx.waitRecv(from, t);
  }
  ctx.drainSends();
}

}  // namespace pycollect
