// Direct all-reduce, for small messages where latency, not bandwidth, matters.
//
// Every rank sends its whole buffer to every other rank in one round, then reduces
// the `size` buffers in rank order: x0 op x1 op ... op x(size-1). Every rank runs
// the same sequence of operations on the same inputs, so every rank ends with
// bit-identical results. Cost: one message latency instead of the ring's
// 2(size-1), for (size-1) times the bytes; worth it only below a few KiB to tens
// of KiB and for small groups (see chooseAllreduce in comm/communicator.cc).
//
// Example with 3 ranks: rank 1 sends x1 to ranks 0 and 2, receives x0 and x2, and
// computes (x0 + x1) + x2, exactly as ranks 0 and 2 do.
#include <cstring>

#include "collectives/collectives.h"
#include "reduce/reduce.h"

namespace pycollect {

void allreduceDirect(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  const int n = ctx.size;
  std::vector<int> peers;
  for (int p = 0; p < n; ++p) {
    if (p != ctx.rank) peers.push_back(p);
  }
  ctx.postHeaders(peers);
  const size_t bytes = count * dtypeSize(dtype);
  // Scratch: one slot per rank; our own input is copied into slot `rank`.
  char* slots = ctx.scratch(static_cast<size_t>(n) * bytes);
  if (bytes > 0) std::memcpy(slots + ctx.rank * bytes, data, bytes);
  // The payload queues right behind the header (one sendmsg, one round trip); it
  // lands in scratch, and the header is checked before the scratch is used.
  std::vector<uint64_t> tickets(n);
  for (int p : peers) ctx.link(p).postSend(slots + ctx.rank * bytes, bytes);
  for (int p : peers) tickets[p] = ctx.link(p).postRecv(slots + p * bytes, bytes);
  ctx.checkHeaders();
  if (n == 1 || count == 0) return;
  for (int p : peers) {
    ctx.setStep("exchange", 0, 1);
    ctx.waitRecv(ctx.link(p), tickets[p]);
  }
  std::memcpy(data, slots, bytes);
  for (int p = 1; p < n; ++p) reduce(data, data, slots + p * bytes, count, dtype, op);
  if (op == ReduceOp::kAvg) divide(data, count, dtype, n);
  ctx.drainSends();
}

}  // namespace pycollect
