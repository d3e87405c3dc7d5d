// Receive-and-reduce of one message that arrives in segments of tunables.segmentBytes:
// each segment is reduced into place while the next ones are still on the wire. The
// halving-doubling all-reduce receives whole messages this way (recvReduce); the tree
// all-reduce interleaves its children segment by segment (SegmentedRecvReduce).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "collectives/context.h"
#include "common/types.h"

namespace pycollect {

// One message of `count` elements from `from`, reduced into `dst` segment by segment:
// dst[i] = dst[i] op received[i]. `slots` segments are posted ahead, each into its own
// slot of `scratch` (recvReduceScratch bytes), and a slot is posted again as soon as its
// segment was reduced (as the ring does). Posts start in the constructor.
class SegmentedRecvReduce {
 public:
  // `beforePost(j)`: called just before segment j's receive is posted (the tree names
  // the trace unit there).
  SegmentedRecvReduce(Context& ctx, Link& from, char* dst, size_t count, DType dtype, ReduceOp op,
                      char* scratch, std::function<void(size_t)> beforePost = {});
  size_t segments() const { return segs_.count; }
  // Waits for segment j (segments arrive in order, so j is the next one), reduces it
  // into dst and posts segment j + slots.
  void reduce(size_t j);

 private:
  char* slot(size_t j) const { return scratch_ + (j % slots_) * slotBytes_; }
  void post(size_t j);

  Context& ctx_;
  Link& from_;
  char* dst_;
  size_t count_;
  DType dtype_;
  ReduceOp op_;
  char* scratch_;
  std::function<void(size_t)> beforePost_;
  size_t es_;
  Segments segs_;
  size_t slots_;
  size_t slotBytes_;
  std::vector<uint64_t> tickets_;
};

// The whole message: every segment reduced. Returns once all are.
void recvReduce(Context& ctx, Link& from, char* dst, size_t count, DType dtype, ReduceOp op,
                char* scratch);
// Scratch bytes for a SegmentedRecvReduce of up to `count` elements.
size_t recvReduceScratch(const Context& ctx, size_t count, DType dtype);
// How many of a message's `segments` are posted ahead: min(segments, tunables.inflight).
size_t postedAhead(const Context& ctx, size_t segments);

}  // namespace pycollect
