// Which function runs each algorithm of the collectives that have a choice, and the
// check that an algorithm fits the collective (before anything is queued).
#include <string>

#include "collectives/collectives.h"
#include "common/error.h"

namespace pycollect {

void checkAllreduceAlgo(Algo algo, const char* what) {
  if (algo == Algo::kRing || algo == Algo::kDirect || algo == Algo::kHalvingDoubling ||
      algo == Algo::kTree || algo == Algo::kHierarchical || algo == Algo::kShared) {
    return;
  }
  throw InvalidArgument(std::string(what) + " has no algorithm \"" + algoName(algo) +
                        "\" (choose auto, ring, direct, halving_doubling, tree, hierarchical or shm)");
}

void checkAllgatherAlgo(Algo algo, const char* what) {
  if (algo == Algo::kRing || algo == Algo::kBruck || algo == Algo::kHierarchical || algo == Algo::kShared) return;
  throw InvalidArgument(std::string(what) + " has no algorithm \"" + algoName(algo) +
                        "\" (choose auto, ring, bruck, hierarchical or shm)");
}

void checkRingOrHierarchy(Algo algo, const char* what) {
  if (algo == Algo::kRing || algo == Algo::kHierarchical || algo == Algo::kShared) return;
  throw InvalidArgument(std::string(what) + " has no algorithm \"" + algoName(algo) +
                        "\" (choose auto, ring, hierarchical or shm)");
}

void allreduceWith(Algo algo, Context& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  switch (algo) {
    case Algo::kDirect:
      return allreduceDirect(ctx, data, count, dtype, op);
    case Algo::kHalvingDoubling:
      return allreduceHalvingDoubling(ctx, data, count, dtype, op);
    case Algo::kTree:
      return allreduceTree(ctx, data, count, dtype, op);
    case Algo::kHierarchical:
      return allreduceHierarchical(ctx, data, count, dtype, op);
    case Algo::kShared:
      return allreduceShared(ctx, data, count, dtype, op);
    default:
      return allreduceRing(ctx, data, count, dtype, op);
  }
}

void checkCompressed(Compress compress, DType dtype, ReduceOp op, Algo algo) {
  if (compress == Compress::kNone) return;
  const std::string what = std::string("all_reduce(compress=\"") + compressName(compress) + "\")";
  if (dtype != DType::kFloat32) {
    throw InvalidArgument(what + " takes float32 tensors, not " + dtypeName(dtype) +
                          (isFloating(dtype) ? " (convert to float32, or all-reduce it uncompressed)"
                                             : " (integers are never compressed: the result must be exact)"));
  }
  if (op != ReduceOp::kSum && op != ReduceOp::kAvg) {
    throw InvalidArgument(what + " sums (SUM or AVG), not " + reduceOpName(op));
  }
  if (algo != Algo::kRing && algo != Algo::kHierarchical) {
    throw InvalidArgument(what + " has no algorithm \"" + algoName(algo) +
                          "\" (choose auto, ring or hierarchical)");
  }
}

void allreduceCompressedWith(Algo algo, Context& ctx, void* data, size_t count, ReduceOp op, Compress compress) {
  if (algo == Algo::kHierarchical) return allreduceHierarchical(ctx, data, count, DType::kFloat32, op, compress);
  allreduceCompressed(ctx, data, count, op, compress);
}

void allgatherWith(Algo algo, Context& ctx, const void* in, void* out, size_t count, DType dtype) {
  if (algo == Algo::kBruck) return allgatherBruck(ctx, in, out, count, dtype);
  if (algo == Algo::kHierarchical) return allgatherHierarchical(ctx, in, out, count, dtype);
  if (algo == Algo::kShared) return allgatherShared(ctx, in, out, count, dtype);
  allgatherRing(ctx, in, out, count, dtype);
}

void reduceScatterWith(Algo algo, Context& ctx, const void* in, void* out, size_t count, DType dtype,
                       ReduceOp op) {
  if (algo == Algo::kHierarchical) return reduceScatterHierarchical(ctx, in, out, count, dtype, op);
  if (algo == Algo::kShared) return reduceScatterShared(ctx, in, out, count, dtype, op);
  reduceScatterRing(ctx, in, out, count, dtype, op);
}

void broadcastWith(Algo algo, Context& ctx, void* data, size_t bytes, int root) {
  if (algo == Algo::kHierarchical) return broadcastHierarchical(ctx, data, bytes, root);
  if (algo == Algo::kShared) return broadcastShared(ctx, data, bytes, root);
  broadcastChain(ctx, data, bytes, root);
}

}  // namespace pycollect
