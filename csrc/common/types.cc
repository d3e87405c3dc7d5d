#include "common/types.h"

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace pycollect {

std::string syscallMessage(const char* call, int err, const std::string& what) {
  return std::string(call) + " failed (" + std::strerror(err) + ", errno " +
         std::to_string(err) + ") " + what;
}

size_t dtypeSize(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kInt8: return 1;
    case DType::kUInt8: return 1;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kInt16: return 2;
    case DType::kBool: return 1;
  }
  return 0;
}

bool isFloating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 ||
         t == DType::kBFloat16;
}

const char* dtypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kInt16: return "int16";
    case DType::kBool: return "bool";
  }
  return "?";
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "SUM";
    case ReduceOp::kProd: return "PROD";
    case ReduceOp::kMin: return "MIN";
    case ReduceOp::kMax: return "MAX";
    case ReduceOp::kAvg: return "AVG";
    case ReduceOp::kBand: return "BAND";
    case ReduceOp::kBor: return "BOR";
    case ReduceOp::kBxor: return "BXOR";
  }
  return "?";
}

const char* opKindName(OpKind k) {
  switch (k) {
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kSend: return "send/recv";
    case OpKind::kReduce: return "reduce";
    case OpKind::kGather: return "gather";
    case OpKind::kScatter: return "scatter";
    case OpKind::kAllToAll: return "all_to_all";
    case OpKind::kAllReduceCoalesced: return "all_reduce_coalesced";
    case OpKind::kAllGatherCoalesced: return "all_gather_coalesced";
    case OpKind::kAllGatherVaried: return "all_gather_varied";
  }
  return "?";
}

const char* algoName(Algo a) {
  switch (a) {
    case Algo::kAuto: return "auto";
    case Algo::kRing: return "ring";
    case Algo::kDirect: return "direct";
    case Algo::kHalvingDoubling: return "halving_doubling";
    case Algo::kTree: return "tree";
    case Algo::kBruck: return "bruck";
    case Algo::kHierarchical: return "hierarchical";
    case Algo::kShared: return "shm";
  }
  return "?";
}

const char* compressName(Compress c) {
  switch (c) {
    case Compress::kNone: return "none";
    case Compress::kBf16: return "bf16";
    case Compress::kInt8: return "int8";
  }
  return "?";
}

DType checkedDType(int v) {
  if (v < 0 || v >= kNumDTypes) {
    throw InvalidArgument("unknown dtype code " + std::to_string(v));
  }
  return static_cast<DType>(v);
}

ReduceOp checkedReduceOp(int v) {
  if (v < 0 || v >= kNumReduceOps) {
    throw InvalidArgument("unknown reduce op code " + std::to_string(v));
  }
  return static_cast<ReduceOp>(v);
}

Algo checkedAlgo(int v) {
  if (v < 0 || v >= kNumAlgos) {
    throw InvalidArgument("unknown algorithm code " + std::to_string(v) +
                          " (0 auto, 1 ring, 2 direct, 3 halving_doubling, 4 tree, 5 bruck)");
  }
  return static_cast<Algo>(v);
}

Compress checkedCompress(int v) {
  if (v < 0 || v >= kNumCompress) {
    throw InvalidArgument("unknown compression code " + std::to_string(v) + " (0 none, 1 bf16, 2 int8)");
  }
  return static_cast<Compress>(v);
}

}  // namespace pycollect
