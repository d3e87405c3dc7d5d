// The algorithms, one file each. Every function runs on the communicator's worker
// thread, after the arguments were validated, and returns once this rank's part is
// done and every buffer it was given is free again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/blocks.h"
#include "collectives/context.h"
#include "common/types.h"

namespace pycollect {

// In place: data holds `count` elements on entry and the reduction on exit. The ring
// moves its segments in blocks of kBlockSegments (allreduce_ring.cc says why).
constexpr size_t kBlockSegments = 2;
void allreduceRing(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op);
void allreduceDirect(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op);
void allreduceHalvingDoubling(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op);
void allreduceTree(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op);
// Two levels (ctx.hierarchy()): reduce-scatter within hosts, all-reduce across them on
// each rail, all-gather within hosts.
// `compress` (float32, kSum or kAvg only): the inter-host level runs the compressed ring
// (allreduce_compressed.cc), the intra-host levels stay exact.
void allreduceHierarchical(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op,
                           Compress compress = Compress::kNone);
// all_reduce(compress=): the ring with every send encoded in `compress` and every receive
// decoded (allreduce_compressed.cc), on float32 `data`, op kSum or kAvg; every rank ends
// with the same bits. algo kRing runs it over the group, kHierarchical on the rails only.
void allreduceCompressed(Context& ctx, void* data, size_t count, ReduceOp op, Compress compress);
void allreduceCompressedWith(Algo algo, Context& ctx, void* data, size_t count, ReduceOp op, Compress compress);
// Throws InvalidArgument unless a compressed all-reduce can run: float32, SUM or AVG,
// algorithm ring or hierarchical (kAuto resolved before).
void checkCompressed(Compress compress, DType dtype, ReduceOp op, Algo algo);
// The all-reduce `algo` names (kRing, kDirect, kHalvingDoubling, kTree or kHierarchical;
// checked by checkAllreduceAlgo before the call was queued).
void allreduceWith(Algo algo, Context& ctx, void* data, size_t count, DType dtype, ReduceOp op);

// out holds size*count elements; rank r's `count` inputs land at out + r*count.
// `in` may be exactly that slot of `out` (in place).
void allgatherRing(Context& ctx, const void* in, void* out, size_t count, DType dtype);
void allgatherBruck(Context& ctx, const void* in, void* out, size_t count, DType dtype);
// Two levels: across hosts on each rail, then within hosts.
void allgatherHierarchical(Context& ctx, const void* in, void* out, size_t count, DType dtype);
// The all-gather `algo` names (kRing, kBruck or kHierarchical).
void allgatherWith(Algo algo, Context& ctx, const void* in, void* out, size_t count, DType dtype);

// The ring over blocks (blocks.h): rank r's block of `base` is read from `own` (packed)
// or, with own == nullptr, already in place; on return every block is in place.
void allgatherRingBlocks(Context& ctx, char* base, const std::vector<Block>& blocks, const char* own,
                         DType dtype);

// Throw InvalidArgument naming `algo` and the choices when it is not one of the
// all-reduce (ring, direct, halving_doubling, tree, hierarchical), all-gather (ring,
// bruck, hierarchical), reduce-scatter or broadcast (ring, hierarchical) algorithms;
// kAuto must have been resolved before.
void checkAllreduceAlgo(Algo algo, const char* what);
void checkAllgatherAlgo(Algo algo, const char* what);
void checkRingOrHierarchy(Algo algo, const char* what);

// in holds size*count elements; out gets the reduction of chunk `rank`.
void reduceScatterRing(Context& ctx, const void* in, void* out, size_t count, DType dtype,
                       ReduceOp op);
void reduceScatterHierarchical(Context& ctx, const void* in, void* out, size_t count, DType dtype,
                               ReduceOp op);
void reduceScatterWith(Algo algo, Context& ctx, const void* in, void* out, size_t count, DType dtype,
                       ReduceOp op);
// The ring over blocks: `out` gets the reduction of rank r's block of `in`, packed.
void reduceScatterRingBlocks(Context& ctx, const char* in, const std::vector<Block>& blocks, char* out,
                             DType dtype, ReduceOp op);

// Pipelined chain from `root` along the ring.
void broadcastChain(Context& ctx, void* data, size_t bytes, int root);
// Chain across hosts (one rank each, the root on its), then within each host.
void broadcastHierarchical(Context& ctx, void* data, size_t bytes, int root);
void broadcastWith(Algo algo, Context& ctx, void* data, size_t bytes, int root);

// Every rank greets every other: returns once all have arrived.
void barrierAll(Context& ctx);

// The shared-memory collectives (shared_arena.h; allreduce_shared.cc, reduce_shared.cc,
// broadcast_shared.cc, gather_shared.cc, alltoall_shared.cc), chosen as kShared for groups on one host. A
// group whose ranks cannot share memory (found at the first such call, alike on every
// rank) runs the link algorithm instead: linkAllreduce's for the all-reduce, the ring or
// chain for the others, the direct ones for gather, scatter and all-to-all, barrierAll for
// the barrier.
void allreduceShared(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op);
void reduceScatterShared(Context& ctx, const void* in, void* out, size_t count, DType dtype, ReduceOp op);
void reduceShared(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op, int root);
void broadcastShared(Context& ctx, void* data, size_t bytes, int root);
void allgatherShared(Context& ctx, const void* in, void* out, size_t count, DType dtype);
// The same into one span per rank; false (nothing done) where the group cannot share memory.
bool allgatherSharedInto(Context& ctx, Span in, const std::vector<Span>& outs, DType dtype);
void barrierShared(Context& ctx);
// At any size (shared_arena.h, "Parts": sizes may differ by rank, so none could choose by its own).
void gatherShared(Context& ctx, Span in, const std::vector<Span>& outs, DType dtype, int root);
void scatterShared(Context& ctx, const std::vector<Span>& ins, Span out, DType dtype, int root);
void alltoallShared(Context& ctx, const std::vector<Span>& ins, const std::vector<Span>& outs, DType dtype);
// The all-reduce that runs on links where the shared one cannot: the direct algorithm
// up to 16 KiB on groups of up to 8 ranks, the ring otherwise (CommOptions' defaults).
Algo linkAllreduce(int size, size_t bytes);

// Pipelined chain towards `root`; only the root's `data` changes (to the reduction).
void reduceChain(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op, int root);

// Root: outs[r] (one span per rank, sizes may differ) gets rank r's `in`. Others:
// `outs` is ignored.
void gatherDirect(Context& ctx, Span in, const std::vector<Span>& outs, DType dtype, int root);

// Root: ins[r] (one per rank) goes to rank r's `out`. Others: `ins` is ignored.
void scatterDirect(Context& ctx, const std::vector<Span>& ins, Span out, DType dtype, int root);

// ins[p] goes to rank p; outs[p] receives rank p's ins[rank]. Sizes may differ by pair.
void alltoallDirect(Context& ctx, const std::vector<Span>& ins, const std::vector<Span>& outs,
                    DType dtype);

// Many tensors of one dtype in one call: packed, run once, unpacked. `algo` is the
// algorithm that runs (any of allreduceWith's, allgatherWith's). outs of the all-gather:
// rank-major, so outs[r * ins.size() + i] gets rank r's ins[i].
void allreduceCoalesced(Context& ctx, const std::vector<Span>& tensors, DType dtype, ReduceOp op,
                        Algo algo);
void allgatherCoalesced(Context& ctx, const std::vector<Span>& ins, const std::vector<Span>& outs,
                        DType dtype, Algo algo);

// The list forms (list_forms.cc): the flat all-gather's and reduce-scatter's calls on the
// wire, with one span per rank on this side. outs[r] gets rank r's `in`; `out` gets the
// reduction of every rank's ins[rank]. `algo`: allgatherWith's, reduceScatterWith's.
void allgatherInto(Algo algo, Context& ctx, Span in, const std::vector<Span>& outs, DType dtype);
void reduceScatterFrom(Algo algo, Context& ctx, const std::vector<Span>& ins, Span out, DType dtype, ReduceOp op);

}  // namespace pycollect
