// The collective cases that more than one part runs (engine_driver.cc runs the parts):
// all-reduce, all-gather, reduce-scatter and broadcast on any algorithm and element type,
// each call issued in one of the ways a program may (runCall), its result checked on every
// rank. part_collectives.cc runs them over TCP, part_hierarchy.cc with the hierarchical
// algorithm, with coalesced all-reduce and all-gather; collectiveSweep (the whole sweep,
// which part_shm.cc runs again over shared memory) is defined in part_collectives.cc.
#pragma once

#include <cmath>
#include <functional>
#include <vector>

#include "values.h"

namespace driver {

// Runs one call in one of the ways a program may: async then Work::wait, blocking (under
// an InlineScope, then waited in slices, as Group.run_blocking), or async then waitDriving.
template <typename Issue>
void runCall(Communicator& c, int style, Issue issue) {
  switch (style % 3) {
    case 0: awaitWork(c, issue(), WaitMode::kWork); break;
    case 1: blocking(c, issue); break;
    default: awaitWork(c, issue(), WaitMode::kDriving); break;
  }
}

const Algo kAllreduceAlgos[] = {Algo::kRing, Algo::kDirect, Algo::kHalvingDoubling, Algo::kTree};

template <typename T>
void allReduceCase(Communicator& c, Algo algo, size_t count, ReduceOp op, int style) {
  const int rank = c.rank(), n = c.size();
  std::vector<T> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = value<T>(rank, i);
  runCall(c, style, [&] { return c.allReduce(data.data(), count, dtypeOf<T>(), op, algo); });
  if (op == ReduceOp::kAvg) {
    for (size_t i = 0; i < count; ++i) {
      const double want = static_cast<double>(reduced<T>(ReduceOp::kSum, n, i)) / n;
      if (std::fabs(data[i] - want) > 1e-5 * std::fabs(want) + 1e-6) {
        EXPECT(false, "all-reduce avg " << pycollect::algoName(algo) << " count " << count << " element " << i
                                        << " is " << data[i] << ", expected " << want);
      }
    }
    report().pass();
    return;
  }
  EXPECT_EACH(data.data(), count, [&](size_t i) { return reduced<T>(op, n, i); },
              "rank " << rank << "/" << n << " all-reduce " << pycollect::algoName(algo) << " "
                      << pycollect::reduceOpName(op) << " " << pycollect::dtypeName(dtypeOf<T>()) << " count "
                      << count);
}

template <typename T>
void allGatherCase(Communicator& c, Algo algo, size_t count, bool inPlace, int style) {
  const int rank = c.rank(), n = c.size();
  std::vector<T> out(count * n, T(-1)), in(count);
  T* own = inPlace ? out.data() + rank * count : in.data();
  for (size_t i = 0; i < count; ++i) own[i] = value<T>(rank, i);
  runCall(c, style, [&] { return c.allGather(own, out.data(), count, dtypeOf<T>(), algo); });
  EXPECT_EACH(out.data(), count * n, [&](size_t j) { return value<T>(static_cast<int>(j / count), j % count); },
              "rank " << rank << "/" << n << " all-gather " << pycollect::algoName(algo) << " count " << count
                      << (inPlace ? " in place" : ""));
}

template <typename T>
void reduceScatterCase(Communicator& c, Algo algo, size_t count, int style) {
  const int rank = c.rank(), n = c.size();
  std::vector<T> in(count * n), out(count, T(-1));
  for (size_t j = 0; j < in.size(); ++j) in[j] = value<T>(rank, j);
  runCall(c, style, [&] {
    return c.reduceScatter(in.data(), out.data(), count, dtypeOf<T>(), ReduceOp::kSum, algo);
  });
  EXPECT_EACH(out.data(), count, [&](size_t i) { return reduced<T>(ReduceOp::kSum, n, rank * count + i); },
              "rank " << rank << "/" << n << " reduce-scatter " << pycollect::algoName(algo) << " count " << count);
}

template <typename T>
void broadcastCase(Communicator& c, Algo algo, size_t count, int root, int style) {
  const int rank = c.rank(), n = c.size();
  std::vector<T> data(count, T(-1));
  if (rank == root) {
    for (size_t i = 0; i < count; ++i) data[i] = value<T>(root, i);
  }
  runCall(c, style, [&] { return c.broadcast(data.data(), count, dtypeOf<T>(), root, algo); });
  EXPECT_EACH(data.data(), count, [&](size_t i) { return value<T>(root, i); },
              "rank " << rank << "/" << n << " broadcast " << pycollect::algoName(algo) << " from " << root
                      << " count " << count);
}

// A reduce of int64 sums to `root`: the root holds the sums, every other rank its own input.
inline void reduceCase(Communicator& c, size_t count, int root, int style) {
  const int rank = c.rank(), n = c.size();
  std::vector<int64_t> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = value<int64_t>(rank, i);
  runCall(c, style, [&] { return c.reduce(data.data(), count, DType::kInt64, ReduceOp::kSum, root); });
  if (rank == root) {
    EXPECT_EACH(data.data(), count, [&](size_t i) { return reduced<int64_t>(ReduceOp::kSum, n, i); },
                "rank " << rank << "/" << n << " reduce to " << root << " count " << count);
  } else {
    EXPECT_EACH(data.data(), count, [&](size_t i) { return value<int64_t>(rank, i); },
                "rank " << rank << "/" << n << " reduce to " << root << " changed a non-root's buffer, count "
                        << count);
  }
}

// The list forms (collectives/list_forms.cc): an all-gather into one vector per rank and a
// reduce-scatter from one, on the even ranks; the odd ranks make the flat calls, which the
// list forms must meet (the same call on the wire).
inline void listFormCases(Communicator& c, Algo algo, size_t count, int style) {
  const int rank = c.rank(), n = c.size();
  const bool list = rank % 2 == 0;
  std::vector<float> in(count), flatOut(count * n, -1.0f);
  for (size_t i = 0; i < count; ++i) in[i] = value<float>(rank, i);
  std::vector<std::vector<float>> parts(n, std::vector<float>(count, -1.0f));
  std::vector<Span> spans;
  for (auto& p : parts) spans.push_back(Span{reinterpret_cast<char*>(p.data()), p.size()});
  const Span mine{reinterpret_cast<char*>(in.data()), count};
  runCall(c, style, [&] {
    return list ? c.allGatherList(mine, spans, DType::kFloat32, algo)
                : c.allGather(in.data(), flatOut.data(), count, DType::kFloat32, algo);
  });
  for (int r = 0; r < n; ++r) {
    const float* got = list ? parts[r].data() : flatOut.data() + r * count;
    EXPECT_EACH(got, count, [&](size_t i) { return value<float>(r, i); },
                "rank " << rank << "/" << n << (list ? " list" : " flat") << " all-gather "
                        << pycollect::algoName(algo) << " count " << count << ": rank " << r << "'s part");
  }
  // Reduce-scatter: rank r's part p holds value(r, p * count + i), as the flat input would.
  std::vector<float> flatIn(count * n), out(count, -1.0f);
  for (size_t j = 0; j < flatIn.size(); ++j) flatIn[j] = value<float>(rank, j);
  for (int p = 0; p < n; ++p) std::copy(flatIn.begin() + p * count, flatIn.begin() + (p + 1) * count, parts[p].begin());
  runCall(c, style + 1, [&] {
    return list ? c.reduceScatterList(spans, Span{reinterpret_cast<char*>(out.data()), count}, DType::kFloat32,
                                      ReduceOp::kSum, algo == Algo::kBruck ? Algo::kAuto : algo)
                : c.reduceScatter(flatIn.data(), out.data(), count, DType::kFloat32, ReduceOp::kSum,
                                  algo == Algo::kBruck ? Algo::kAuto : algo);
  });
  EXPECT_EACH(out.data(), count, [&](size_t i) { return reduced<float>(ReduceOp::kSum, n, rank * count + i); },
              "rank " << rank << "/" << n << (list ? " list" : " flat") << " reduce-scatter count " << count);
}

// All-reduce and all-gather of several tensors at once (some empty).
inline void coalescedCases(Communicator& c, Algo algo, int style) {
  const int rank = c.rank(), n = c.size();
  const size_t counts[] = {7, 0, 1000, size_t{1} << 15};
  std::vector<std::vector<float>> tensors;
  std::vector<Span> spans;
  for (size_t k = 0; k < 4; ++k) {
    tensors.emplace_back(counts[k]);
    for (size_t i = 0; i < counts[k]; ++i) tensors[k][i] = value<float>(rank, i + k);
  }
  for (auto& t : tensors) spans.push_back(Span{reinterpret_cast<char*>(t.data()), t.size()});
  runCall(c, style, [&] { return c.allReduceCoalesced(spans, DType::kFloat32, ReduceOp::kSum, algo); });
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EACH(tensors[k].data(), counts[k], [&](size_t i) { return reduced<float>(ReduceOp::kSum, n, i + k); },
                "rank " << rank << "/" << n << " all-reduce coalesced " << pycollect::algoName(algo) << " tensor "
                        << k);
  }

  const size_t inCounts[] = {3, 0, 500};
  std::vector<std::vector<int64_t>> ins, outs;
  std::vector<Span> inSpans, outSpans;
  for (size_t k = 0; k < 3; ++k) {
    ins.emplace_back(inCounts[k]);
    for (size_t i = 0; i < inCounts[k]; ++i) ins[k][i] = payload(rank, 0, static_cast<int>(k), i);
  }
  for (int r = 0; r < n; ++r) {
    for (size_t k = 0; k < 3; ++k) outs.emplace_back(inCounts[k], -1);
  }
  for (auto& v : ins) inSpans.push_back(Span{reinterpret_cast<char*>(v.data()), v.size()});
  for (auto& v : outs) outSpans.push_back(Span{reinterpret_cast<char*>(v.data()), v.size()});
  const Algo gatherAlgo = algo == Algo::kRing ? Algo::kRing : Algo::kBruck;
  runCall(c, style + 1, [&] { return c.allGatherCoalesced(inSpans, outSpans, DType::kInt64, gatherAlgo); });
  for (int r = 0; r < n; ++r) {
    for (size_t k = 0; k < 3; ++k) {
      const auto& o = outs[r * 3 + k];
      EXPECT_EACH(o.data(), o.size(), [&](size_t i) { return payload(r, 0, static_cast<int>(k), i); },
                  "rank " << rank << "/" << n << " all-gather coalesced " << pycollect::algoName(gatherAlgo)
                          << ": rank " << r << "'s tensor " << k);
    }
  }
}


struct Sweep {
  std::vector<size_t> allreduceCounts;
  std::vector<size_t> counts;  // the other collectives'
  bool int64 = true;
  bool shared = false;  // the all-reduce forced through the shared arena too (a group on one host)
};

void collectiveSweep(Communicator& c, const Sweep& sweep);

}  // namespace driver
