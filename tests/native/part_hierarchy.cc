// The native driver's hierarchy part: 4 ranks as 2 hosts x 2 and 3 as 2 + 1 (TCP between
// hosts, shared memory within one, as each link must be): the hierarchical all-reduce
// (and kAuto choosing it), all-gather, reduce-scatter, broadcast and coalesced calls, with
// 16 MiB pipelined in 64 KiB segments; results checked as in the collectives part.
#include "collective_cases.h"
#include "parts.h"

namespace driver {
namespace {

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
    runGroup(spec, [&](Communicator& c, Barrier&, int rank) {
      expectLinks(c, [&](int peer) { return hostOf[peer] == hostOf[rank] ? "shm" : "tcp"; });
      hierarchicalCases(c);
    });
  }
}

}  // namespace driver
