// An all-gather whose count differs by rank, in one queued call (Communicator::allGatherVaried).
//
// Each rank knows its own count only. The call runs in two phases on the ring's links,
// under one header whose count is 0 (the ranks' counts differ, and their headers must
// agree): the ring all-gathers the counts, one per rank; then, in a view of the group
// (Context's second constructor, which exchanges no header of its own), the ring gathers
// the elements in blocks of those sizes (allgatherRingBlocks). The result's memory is
// sized once the counts are known, on the thread that runs the call.
//
// Example with 3 ranks giving 2, 0 and 3 elements: the counts [2, 0, 3] reach every rank,
// the blocks are [0, 2), [2, 2) and [2, 5), and every rank ends with the 5 elements in
// rank order.
//
// Being one call, it is issued in its caller's order like any other: torch's sparse
// all-reduce issues two (indices, values) when it is called and never waits for a peer
// there (torch_backend/sparse.cc).
#include <numeric>

#include "comm/communicator.h"
#include "common/error.h"

namespace pycollect {

std::shared_ptr<Work> Communicator::allGatherVaried(const void* in, size_t count, DType dtype,
                                                    std::shared_ptr<VariedGather> out) {
  if (out == nullptr) throw InvalidArgument("all_gather_varied: no result to fill");
  const WireHeader h = makeHeader(OpKind::kAllGatherVaried, dtype, ReduceOp::kSum, 0, -1);
  return enqueue(h, [=](Context& c) {
    out->counts.assign(c.size, 0);
    const uint64_t mine = count;
    allgatherRing(c, &mine, out->counts.data(), 1, DType::kInt64);
    std::vector<Block> blocks;
    size_t total = 0;
    for (uint64_t n : out->counts) {
      blocks.push_back({{total, static_cast<size_t>(n)}});
      total += n;
    }
    out->data.assign(total * dtypeSize(dtype), 0);
    std::vector<int> everyone(c.size);
    std::iota(everyone.begin(), everyone.end(), 0);
    Context elements(c, everyone, "elements");
    allgatherRingBlocks(elements, out->data.data(), blocks, static_cast<const char*>(in), dtype);
  });
}

}  // namespace pycollect
