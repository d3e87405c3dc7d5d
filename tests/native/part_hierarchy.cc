// The native driver's hierarchy part: 4 ranks as 2 hosts x 2 and 3 as 2 + 1 (TCP between
// hosts, shared memory within one, as each link must be): the hierarchical all-reduce
// (and kAuto choosing it), all-gather, reduce-scatter, broadcast and coalesced calls, with
// 16 MiB pipelined in 64 KiB segments; results checked as in the collectives part. The
// compressed all-reduce (bf16, int8) too, on the hierarchy's rails and as the flat ring:
// every value within the stated bound (pycollect/compression.py), every rank the same bits.
#include <algorithm>
#include <cstring>

#include "collective_cases.h"
#include "parts.h"

namespace driver {
namespace {

// One compressed all-reduce of float values (value<float>: positive, so the sum is its own
// A of the bound), checked against the bound with k = the group's size (at least the
// ring's length) and, through `firsts` (one slot per rank), for the same bits everywhere.
void compressedCase(Communicator& c, Barrier& barrier, std::vector<std::vector<float>>& results, Algo algo,
                    pycollect::Compress compress, size_t count, int style) {
  const int rank = c.rank(), n = c.size();
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = value<float>(rank, i);
  runCall(c, style, [&] { return c.allReduce(data.data(), count, DType::kFloat32, ReduceOp::kSum, algo, compress); });
  // The bound's window (the 511 sums centred on i) lies within the 256-value blocks from
  // (i - 255) / 256 to (i + 255) / 256: their largest sums bound it (a little loosely).
  std::vector<double> blockMax((count + 255) / 256, 0.0);
  for (size_t i = 0; i < count; ++i) {
    blockMax[i / 256] = std::max(blockMax[i / 256], static_cast<double>(reduced<float>(ReduceOp::kSum, n, i)));
  }
  for (size_t i = 0; i < count; ++i) {
    const double want = reduced<float>(ReduceOp::kSum, n, i);
    double window = 0;
    for (size_t b = (i < 255 ? 0 : i - 255) / 256; b <= std::min(count - 1, i + 255) / 256; ++b) {
      window = std::max(window, blockMax[b]);
    }
    if (std::fabs(data[i] - want) > n * window / 254.0 * 1.001 + n * 1e-7 * want) {
      EXPECT(false, "rank " << rank << " compressed all-reduce " << pycollect::compressName(compress) << " "
                            << pycollect::algoName(algo) << " count " << count << " element " << i << " is "
                            << data[i] << ", expected " << want << " within the bound");
    }
  }
  results[rank] = data;
  barrier.wait();
  EXPECT(count == 0 || std::memcmp(results[0].data(), data.data(), count * sizeof(float)) == 0,
         "rank " << rank << " compressed all-reduce " << pycollect::compressName(compress) << " count " << count
                 << ": not the same bits as rank 0's");
  barrier.wait();
}

void compressedCases(Communicator& c, Barrier& barrier, std::vector<std::vector<float>>& results) {
  int style = c.rank();
  stage() = "compressed all-reduce";
  for (pycollect::Compress compress : {pycollect::Compress::kBf16, pycollect::Compress::kInt8}) {
    for (Algo algo : {Algo::kHierarchical, Algo::kRing}) {
      for (size_t count : {size_t{0}, size_t{257}, size_t{1} << 16, size_t{1} << 20}) {
        compressedCase(c, barrier, results, algo, compress, count, style++);
      }
    }
  }
}

void hierarchicalCases(Communicator& c) {
  const int n = c.size();
  int style = c.rank();
  const size_t big = size_t{4} << 20;  // 16 MiB of float32: pipelined in slices
  stage() = "hierarchical all-reduce";
  for (size_t count : {size_t{0}, size_t{7}, size_t{1} << 16, big}) {
    allReduceCase<float>(c, Algo::kHierarchical, count, ReduceOp::kSum, style++);
  }
  allReduceCase<float>(c, Algo::kAuto, big, ReduceOp::kSum, style++);  // kAuto picks the hierarchy (from 1 MiB)
  allReduceCase<int64_t>(c, Algo::kHierarchical, 1001, ReduceOp::kMax, style++);
  allReduceCase<float>(c, Algo::kHierarchical, 1001, ReduceOp::kAvg, style++);
  stage() = "hierarchical all-gather";
  for (size_t count : {size_t{7}, size_t{1} << 16, big / n}) {
    allGatherCase<float>(c, Algo::kHierarchical, count, count == 7, style++);
  }
  stage() = "hierarchical reduce-scatter";
  for (size_t count : {size_t{7}, size_t{1} << 16, big / n}) {
    reduceScatterCase<float>(c, Algo::kHierarchical, count, style++);
  }
  stage() = "hierarchical broadcast";
  for (int root = 0; root < n; ++root) {
    broadcastCase<float>(c, Algo::kHierarchical, root == 1 ? big : 1001, root, style++);
  }
  stage() = "hierarchical coalesced";
  coalescedCases(c, Algo::kHierarchical, style++);
}

}  // namespace

void partHierarchy() {
  const std::vector<std::vector<int>> layouts = {{0, 0, 1, 1}, {0, 0, 1}};
  for (const auto& hostOf : layouts) {
    GroupSpec spec;
    spec.size = static_cast<int>(hostOf.size());
    spec.hostOf = hostOf;
    spec.from = pycollect::HierarchicalFrom{size_t{1} << 20, size_t{1} << 20, size_t{1} << 20, size_t{1} << 20};
    spec.options = [&hostOf](int rank) {
      CommOptions o = makeOptions(TransportKind::kAuto);
      o.hostTag = "driver-host" + std::to_string(hostOf[rank]);
      o.tunables.segmentBytes = 64 << 10;  // 16 MiB is then pipelined in its 16 slices
      return o;
    };
    std::vector<std::vector<float>> results(hostOf.size());
    runGroup(spec, [&](Communicator& c, Barrier& barrier, int rank) {
      expectLinks(c, [&](int peer) { return hostOf[peer] == hostOf[rank] ? "shm" : "tcp"; });
      hierarchicalCases(c);
      compressedCases(c, barrier, results);
    });
  }
}

}  // namespace driver
