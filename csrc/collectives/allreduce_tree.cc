// Binomial-tree all-reduce: a binomial-tree reduce to rank 0, then a binomial-tree
// broadcast of the result from rank 0, both pipelined by segments: ceil(log2 p) levels,
// each edge carrying all n bytes, but segment j goes up the tree while segment j-D of
// the result comes down it. Fewer messages per segment than the ring (a rank talks to
// its parent and children only) at the price of every edge carrying the whole vector.
//
// The tree: rank r's parent is r - lowbit(r) (rank 0 has none); its children are
// r + 1, r + 2, r + 4, .. below both lowbit(r) and p. A child r + 2^k roots a subtree of
// up to 2^k ranks.
// Per segment j (tunables.segmentBytes), a rank:
//   1. receives segment j of each child's partial result, in order of increasing 2^k
//      (child r+1 first), and reduces it into its own (own op child): the order of
//      the operands is fixed by the tree, so the result does not depend on timing;
//   2. sends segment j to its parent; rank 0 instead has the result's segment j
//      (after AVG's division by p) and sends it to its children, largest subtree first;
//   3. waits for the result's segment j-D from its parent and forwards it to its
//      children; the last D segments follow the loop. D is the number of receive
//      slots a parent keeps posted per child (tunables.inflight, at most k).
// Why D segments behind and not 1: a child's segment j+1 goes up only once j-D has come
// down, so D+1 segments are on their way around the loop (up to the root and back) at
// any time. With D = 1 the loop must take no longer than two segment times; on a real
// link (TCP, the data queued in socket buffers and in the switch) it takes longer, and
// the whole pipeline slows to the loop's pace (docs/measurements.md, "Tree all-reduce").
// No rank waits for anything its parent needs from it first: a rank sends segment j
// up before it waits for segment j-D to come down, and the parent forwards j-D only
// after receiving j-D, so the pipeline never deadlocks. The result's segment j lands in
// the rank's own vector, which its parent has already read (it computed the result
// from it).
//
// Example with 5 ranks (parents: 1->0, 2->0, 3->2, 4->0), one segment:
//   up: 1 sends x1 to 0 (x0+x1), 3 sends x3 to 2 (x2+x3),
//       2 sends x2+x3 to 0: (x0+x1)+(x2+x3), 4 sends x4 to 0: ((x0+x1)+(x2+x3))+x4
//   down: 0 sends the result to 4, 2 and 1; 2 forwards it to 3.
// With k segments, while 0 reduces segment D, segment 0 of the result is on its way down.
// Only rank 0 computes the result; the others receive its bytes, so all are identical.
//
// Cost (n = bytes per rank in k segments of s bytes, alpha per message, beta per byte
// on the wire, gamma per byte reduced, L = ceil(log2 p) levels): rank 0 receives and
// reduces k segments from each of its L children and sends k to each,
//   L * k * (alpha + s*beta + s*gamma) + L * k * (alpha + s*beta),
// and the first segment's trip up and down the tree, 2L segment times, is hidden behind
// that when k is large. With one segment it is the unpipelined tree:
//   L * (alpha + n*beta + n*gamma) + L * (alpha + n*beta).
// Plus, as every algorithm, one header exchange (about one alpha) before the first step.
#include <algorithm>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/peers.h"
#include "collectives/recv_reduce.h"
#include "reduce/reduce.h"

namespace pycollect {

void allreduceTree(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  const int p = ctx.size;
  const int rank = ctx.rank;
  std::vector<int> children;  // increasing subtree size
  std::vector<int> childStep;
  int parent = -1, parentStep = 0, steps = 0;
  for (int mask = 1, k = 0; mask < p; mask <<= 1, ++k) {
    steps = k + 1;
    if (parent >= 0) continue;
    if (rank & mask) {
      parent = rank - mask;
      parentStep = k;
    } else if (rank + mask < p) {
      children.push_back(rank + mask);
      childStep.push_back(k);
    }
  }
  std::vector<int> partners = children;
  if (parent >= 0) partners.push_back(parent);
  ctx.exchangeHeaders(headerPeers(ctx.ringPeers(), partners, rank));
  if (p == 1 || count == 0) return;

  const size_t es = dtypeSize(dtype);
  char* base = static_cast<char*>(data);
  Segments segs = pipelineSegments(ctx, count, es);
  const size_t k = segs.count;
  auto segPtr = [&](size_t j) { return base + segs.begin(j, count) * es; };
  auto segLen = [&](size_t j) { return segs.size(j, count); };
  // Each child's partial result arrives segment by segment into scratch slots of its
  // own, `slots` posted ahead and each posted again once reduced into our vector.
  const size_t slots = postedAhead(ctx, k);
  const size_t perChild = recvReduceScratch(ctx, count, dtype);
  char* scratch = children.empty() ? nullptr : ctx.scratch(children.size() * perChild);
  std::vector<SegmentedRecvReduce> fromChild;
  fromChild.reserve(children.size());
  for (size_t c = 0; c < children.size(); ++c) {
    const int step = childStep[c];
    fromChild.emplace_back(ctx, ctx.link(children[c]), base, count, dtype, op, scratch + c * perChild,
                           [&ctx, step](size_t j) { ctx.setUnit("reduce", step, -1, static_cast<int64_t>(j)); });
  }
  // The result's segments come down from the parent into our own vector.
  const int downStep = steps - 1 - parentStep;  // the broadcast mirrors the reduce
  std::vector<uint64_t> fromParent(parent >= 0 ? k : 0);
  for (size_t j = 0; j < fromParent.size(); ++j) {
    ctx.setUnit("broadcast", downStep, -1, static_cast<int64_t>(j));
    fromParent[j] = ctx.link(parent).postRecv(segPtr(j), segLen(j) * es);
  }
  auto sendDown = [&](size_t j) {
    for (size_t c = children.size(); c-- > 0;) {
      ctx.setUnit("broadcast", steps - 1 - childStep[c], -1, static_cast<int64_t>(j));
      ctx.link(children[c]).postSend(segPtr(j), segLen(j) * es);
    }
  };
  auto receiveAndForward = [&](size_t j) {
    ctx.setStep("broadcast", downStep, steps);
    ctx.setUnit("broadcast", downStep, -1, static_cast<int64_t>(j));
    ctx.waitRecv(ctx.link(parent), fromParent[j]);
    sendDown(j);
  };
  for (size_t j = 0; j < k; ++j) {
    for (size_t c = 0; c < children.size(); ++c) {
      ctx.setStep("reduce", childStep[c], steps);
      ctx.setUnit("reduce", childStep[c], -1, static_cast<int64_t>(j));
      fromChild[c].reduce(j);
    }
    if (parent >= 0) {
      ctx.setUnit("reduce", parentStep, -1, static_cast<int64_t>(j));
      ctx.link(parent).postSend(segPtr(j), segLen(j) * es);
      if (j >= slots) receiveAndForward(j - slots);
    } else {
      if (op == ReduceOp::kAvg) divide(segPtr(j), segLen(j), dtype, p);
      sendDown(j);
    }
  }
  if (parent >= 0) {
    for (size_t j = k - slots; j < k; ++j) receiveAndForward(j);
  }
  ctx.drainSends();
}

}  // namespace pycollect
