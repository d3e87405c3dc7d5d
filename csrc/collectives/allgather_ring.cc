// Ring all-gather.
//
// `out` is `size` chunks of `count` elements; rank r starts with its input in
// chunk r. At step s = 0 .. size-2 rank r sends chunk (r - s) mod size to its right
// neighbour and receives chunk (r - s - 1) mod size from its left one, straight
// into `out`: after size-1 steps every chunk has been around the ring.
//
// Example with 3 ranks holding A (rank 0), B (rank 1), C (rank 2):
//   step 0: 0 sends A to 1, 1 sends B to 2, 2 sends C to 0  -> 0: A.C  1: AB.  2: .BC
//   step 1: 0 sends C to 1, 1 sends A to 2, 2 sends B to 0  -> everyone: ABC
//
// Pipelining: chunks are cut into segments; a received segment is forwarded at
// once, so step s+1 of a segment overlaps step s of the next one. Each byte
// crosses each link once: per rank (size-1)*count elements sent and received.
// Our own chunk is sent straight from `in`, and copied into `out` segment by
// segment while the transfer runs, instead of before it starts.
#include <cstring>

#include "collectives/collectives.h"

namespace pycollect {

void allgatherRing(Context& ctx, const void* in, void* out, size_t count, DType dtype) {
  const int n = ctx.size;
  const int r = ctx.rank;
  const size_t es = dtypeSize(dtype);
  char* base = static_cast<char*>(out);
  const char* src = static_cast<const char*>(in);
  const size_t chunkBytes = count * es;
  const bool copyOwn = src != base + r * chunkBytes && chunkBytes > 0;
  ctx.exchangeHeaders(ctx.ringPeers());
  if (n == 1 || count == 0) {
    if (copyOwn) std::memmove(base + r * chunkBytes, src, chunkBytes);
    return;
  }
  Segments segs = pipelineSegments(ctx, count, es);
  const size_t nseg = segs.count;
  const int steps = n - 1;
  const size_t units = steps * nseg;
  Link& right = ctx.link(ctx.right());
  Link& left = ctx.link(ctx.left());
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  auto segPtr = [&](int c, size_t j) { return base + (c * count + segs.begin(j, count)) * es; };
  auto segBytes = [&](size_t j) { return segs.size(j, count) * es; };

  // Every receive goes to its final place, so all of them can be posted now.
  std::vector<uint64_t> tickets(units);
  for (size_t u = 0; u < units; ++u) {
    int c = mod(r - static_cast<int>(u / nseg) - 1);
    ctx.setUnit("all-gather", static_cast<int>(u / nseg), c, u % nseg);
    tickets[u] = left.postRecv(segPtr(c, u % nseg), segBytes(u % nseg));
  }
  auto ownSrc = [&](size_t j) { return src + segs.begin(j, count) * es; };
  for (size_t j = 0; j < nseg; ++j) {
    ctx.setUnit("all-gather", 0, r, j);
    right.postSend(ownSrc(j), segBytes(j));
  }
  for (size_t u = 0; u < units; ++u) {
    const int s = static_cast<int>(u / nseg);
    ctx.setStep("all-gather", s, steps);
    ctx.waitRecv(left, tickets[u]);
    if (s + 1 < steps) {
      ctx.setUnit("all-gather", s + 1, mod(r - s - 1), u % nseg);
      right.postSend(segPtr(mod(r - s - 1), u % nseg), segBytes(u % nseg));
    }
    // One segment of our own chunk per received one (units >= nseg); the sends
    // read `in`, so this copy never races them. memmove: `in` may overlap `out`.
    if (copyOwn && u < nseg) std::memmove(segPtr(r, u), ownSrc(u), segBytes(u));
  }
  ctx.drainSends();
}

}  // namespace pycollect
