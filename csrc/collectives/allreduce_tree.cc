// Binomial-tree all-reduce: a binomial-tree reduce to rank 0, then a binomial-tree
// broadcast of the result from rank 0. ceil(log2 p) steps each way, each moving the
// whole message over one edge: fewer messages than the ring (2*ceil(log2 p) instead
// of 2(p-1)) but every edge carries all n bytes, so it suits small messages.
//
// The tree: rank r's parent is r - lowbit(r) (rank 0 has none); its children are
// r + 1, r + 2, r + 4, .. below both lowbit(r) and p. A child r + 2^k roots a subtree of
// up to 2^k ranks.
// Reduce, steps k = 0 .. ceil(log2 p)-1: a rank receives its children's partial results
//   in order of increasing 2^k (child r+1 first) and reduces each into its own vector
//   (own op child), then sends the vector to its parent and waits. The order of the
//   operands is fixed by the tree, so the result does not depend on timing.
// Broadcast, the mirror: rank 0 (after AVG's single division by p) sends the result to
//   its children, the largest subtree first; every other rank receives it from its
//   parent into its vector and forwards it to its own children.
//
// Example with 5 ranks (parents: 1->0, 2->0, 3->2, 4->0):
//   reduce step 0: 1 sends x1 to 0 (x0+x1), 3 sends x3 to 2 (x2+x3)
//   reduce step 1: 2 sends x2+x3 to 0: (x0+x1)+(x2+x3)
//   reduce step 2: 4 sends x4 to 0: ((x0+x1)+(x2+x3))+x4, the result
//   broadcast: step 0: 0 sends to 4; step 1: 0 sends to 2; step 2: 0 sends to 1, 2 to 3.
// Only rank 0 computes the result; the others receive its bytes, so all are identical.
//
// Cost (n = bytes per rank, alpha per message, beta per byte on the wire, gamma per
// byte reduced), the whole message on every edge, not pipelined across the tree:
//   ceil(log2 p) * (alpha + n*beta + n*gamma)      reduce
//   + ceil(log2 p) * (alpha + n*beta)               broadcast
// A received message arrives in segments of tunables.segmentBytes (s), each reduced
// while the next is on the wire, so a reduce step costs alpha + max(beta, gamma)*n +
// min(beta, gamma)*min(n, s) rather than alpha + n*(beta + gamma). A rank with several
// children posts the broadcast sends on all of them at once. Plus, as every algorithm,
// one header exchange (about one alpha) before the first step.
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

  const size_t bytes = count * dtypeSize(dtype);
  char* base = static_cast<char*>(data);
  char* scratch = children.empty() ? nullptr : ctx.scratch(recvReduceScratch(ctx, count, dtype));

  for (size_t i = 0; i < children.size(); ++i) {
    ctx.setStep("reduce", childStep[i], steps);
    recvReduce(ctx, ctx.link(children[i]), base, count, dtype, op, scratch);
  }
  if (parent >= 0) {
    Link& up = ctx.link(parent);
    up.postSend(base, bytes);
    // The parent sends the result only after it received our vector, so our send has
    // left `base` before this receive writes into it.
    uint64_t t = up.postRecv(base, bytes);
    ctx.setStep("broadcast", steps - 1 - parentStep, steps);  // mirror of the reduce
    ctx.waitRecv(up, t);
  } else if (op == ReduceOp::kAvg) {
    divide(base, count, dtype, p);
  }
  for (size_t i = children.size(); i-- > 0;) ctx.link(children[i]).postSend(base, bytes);
  ctx.drainSends();
}

}  // namespace pycollect
