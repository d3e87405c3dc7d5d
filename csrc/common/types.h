// Element types, reduction ops and collective kinds shared by every layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pycollect {

enum class DType : uint8_t {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kInt8 = 4,
  kUInt8 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kInt16 = 8,
  kBool = 9,  // one byte, 0 or 1; reduces as torch's Gloo does: SUM and MAX are OR, PRODUCT and MIN AND
};
constexpr int kNumDTypes = 10;

enum class ReduceOp : uint8_t {
  kSum = 0,
  kProd = 1,
  kMin = 2,
  kMax = 3,
  kAvg = 4,
  kBand = 5,  // bitwise, integer and bool dtypes only (as Gloo's)
  kBor = 6,
  kBxor = 7,
};
constexpr int kNumReduceOps = 8;

enum class OpKind : uint8_t {
  kAllReduce = 0,
  kAllGather = 1,
  kReduceScatter = 2,
  kBroadcast = 3,
  kBarrier = 4,
  kSend = 5,  // on the wire, a send and its matching recv carry the same kind
  kReduce = 6,
  kGather = 7,
  kScatter = 8,
  kAllToAll = 9,               // list form: a count per peer
  kAllReduceCoalesced = 10,    // many tensors, one header: root carries the tensor count
  kAllGatherCoalesced = 11,
  kAllGatherVaried = 12,       // counts differ by rank: the header carries 0
};

// All-reduce algorithms. kAuto lets the communicator choose by size; the header
// always carries the algorithm that actually runs (kAuto only for other kinds).
enum class Algo : uint8_t {
  kAuto = 0,
  kRing = 1,
  kDirect = 2,
  kHalvingDoubling = 3,  // all-reduce: recursive halving-doubling (Rabenseifner)
  kTree = 4,             // all-reduce: tree reduce + broadcast
  kBruck = 5,            // all-gather: Bruck's log-step exchange
  kHierarchical = 6,     // two levels: within hosts, then across them (hierarchy.h)
  kShared = 7,           // one host: through the group's shared arena (shared_arena.h)
};
constexpr int kNumAlgos = 8;

// An all-reduce's wire format (reduce/compress.h): float32 as it is, or compressed for the
// network. Opt-in per call; the header carries it, so ranks that disagree mismatch.
enum class Compress : uint8_t {
  kNone = 0,
  kBf16 = 1,  // bfloat16, rounded to nearest-even
  kInt8 = 2,  // int8 in blocks of kInt8Block elements, one float32 scale per block
};
constexpr int kNumCompress = 3;

size_t dtypeSize(DType t);
bool isFloating(DType t);
const char* dtypeName(DType t);
const char* reduceOpName(ReduceOp op);
const char* opKindName(OpKind k);
const char* algoName(Algo a);
const char* compressName(Compress c);

// Throws InvalidArgument for values outside the enums (they come from Python as ints).
DType checkedDType(int v);
ReduceOp checkedReduceOp(int v);
Algo checkedAlgo(int v);
Compress checkedCompress(int v);

}  // namespace pycollect
