// Which function runs each algorithm of the collectives that have a choice, and the
// check that an algorithm fits the collective (before anything is queued).
#include <string>

#include "collectives/collectives.h"
#include "common/error.h"

namespace pycollect {

void checkAllreduceAlgo(Algo algo, const char* what) {
  if (algo == Algo::kRing || algo == Algo::kDirect || algo == Algo::kHalvingDoubling ||
      algo == Algo::kTree) {
    return;
  }
  throw InvalidArgument(std::string(what) + " has no algorithm \"" + algoName(algo) +
                        "\" (choose auto, ring, direct, halving_doubling or tree)");
}

void checkAllgatherAlgo(Algo algo, const char* what) {
  if (algo == Algo::kRing || algo == Algo::kBruck) return;
  throw InvalidArgument(std::string(what) + " has no algorithm \"" + algoName(algo) +
                        "\" (choose auto, ring or bruck)");
}

void allreduceWith(Algo algo, Context& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  switch (algo) {
    case Algo::kDirect:
      return allreduceDirect(ctx, data, count, dtype, op);
    case Algo::kHalvingDoubling:
      return allreduceHalvingDoubling(ctx, data, count, dtype, op);
    case Algo::kTree:
      return allreduceTree(ctx, data, count, dtype, op);
    default:
      return allreduceRing(ctx, data, count, dtype, op);
  }
}

void allgatherWith(Algo algo, Context& ctx, const void* in, void* out, size_t count, DType dtype) {
  if (algo == Algo::kBruck) return allgatherBruck(ctx, in, out, count, dtype);
  allgatherRing(ctx, in, out, count, dtype);
}

}  // namespace pycollect
