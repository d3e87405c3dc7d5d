// The native driver's collectives part: every collective on 3 and 4 ranks over TCP. The
// four all-reduce algorithms on float32 and int64 (0 .. 1M elements, sum, max, min, avg, the
// bitwise and and xor),
// all-gather (ring, Bruck, in place), reduce-scatter, broadcast from every root, barrier,
// reduce, gather and scatter (uneven shares, one empty), the all-gather of counts that differ
// by rank, all-to-all, the list forms of all-gather and reduce-scatter (meeting the flat
// calls), coalesced all-reduce and all-gather, calls issued from completion hooks; each call issued blocking under InlineScope or async and waited on in
// another way, and rounds of async calls queued back to back and waited on in reverse.
// Every rank's result is checked against values.h. collectiveSweep is also part_shm.cc's.
#include <condition_variable>
#include <iterator>
#include <deque>
#include <functional>
#include <mutex>

#include "collective_cases.h"
#include "parts.h"

namespace driver {
namespace {

// Rank r's share in gather and scatter: sizes differ by rank, rank 1's is empty.
size_t shareOf(int r, size_t base) { return r == 1 ? 0 : base + 5 * r; }

void gatherCase(Communicator& c, size_t base, int root, int style) {
  const int rank = c.rank(), n = c.size();
  std::vector<float> in(shareOf(rank, base));
  for (size_t i = 0; i < in.size(); ++i) in[i] = value<float>(rank, i);
  std::vector<std::vector<float>> outs;
  std::vector<Span> spans;
  if (rank == root) {
    for (int r = 0; r < n; ++r) outs.emplace_back(shareOf(r, base), -1.0f);
    for (auto& o : outs) spans.push_back(Span{reinterpret_cast<char*>(o.data()), o.size()});
  }
  Span mine{reinterpret_cast<char*>(in.data()), in.size()};
  runCall(c, style, [&] { return c.gather(mine, spans, DType::kFloat32, root); });
  if (rank == root) {
    for (int r = 0; r < n; ++r) {
      EXPECT_EACH(outs[r].data(), outs[r].size(), [&](size_t i) { return value<float>(r, i); },
                  "gather to " << root << " of " << n << ": rank " << r << "'s share");
    }
  }
}

void scatterCase(Communicator& c, size_t base, int root, int style) {
  const int rank = c.rank(), n = c.size();
  std::vector<std::vector<float>> ins;
  std::vector<Span> spans;
  if (rank == root) {
    for (int r = 0; r < n; ++r) {
      ins.emplace_back(shareOf(r, base));
      for (size_t i = 0; i < ins.back().size(); ++i) ins.back()[i] = value<float>(r, i) + 0.5f;
    }
    for (auto& s : ins) spans.push_back(Span{reinterpret_cast<char*>(s.data()), s.size()});
  }
  std::vector<float> out(shareOf(rank, base), -1.0f);
  Span mine{reinterpret_cast<char*>(out.data()), out.size()};
  runCall(c, style, [&] { return c.scatter(spans, mine, DType::kFloat32, root); });
  EXPECT_EACH(out.data(), out.size(), [&](size_t i) { return value<float>(rank, i) + 0.5f; },
              "rank " << rank << "/" << n << " scatter from " << root);
}

// All-to-all's pair sizes: symmetric (a's to b is as long as b expects), some empty.
size_t pairLength(int a, int b, size_t scale) { return static_cast<size_t>(((a + 1) * (b + 1)) % 4) * scale; }

// allGatherVaried: rank r gives shareOf(r, base) elements (rank 1's none); every rank gets
// every share, in rank order, and the counts.
void variedGatherCase(Communicator& c, size_t base, int style) {
  const int rank = c.rank(), n = c.size();
  std::vector<int64_t> in(shareOf(rank, base));
  for (size_t i = 0; i < in.size(); ++i) in[i] = value<int64_t>(rank, i);
  auto out = std::make_shared<Communicator::VariedGather>();
  runCall(c, style, [&] { return c.allGatherVaried(in.data(), in.size(), DType::kInt64, out); });
  const auto* got = reinterpret_cast<const int64_t*>(out->data.data());
  size_t at = 0;
  for (int r = 0; r < n; ++r) {
    EXPECT_EACH(&out->counts[r], 1, [&](size_t) { return static_cast<uint64_t>(shareOf(r, base)); },
                "varied all-gather of " << n << " on rank " << rank << ": rank " << r << "'s count");
    EXPECT_EACH(got + at, shareOf(r, base), [&](size_t i) { return value<int64_t>(r, i); },
                "varied all-gather of " << n << " on rank " << rank << ": rank " << r << "'s share");
    at += shareOf(r, base);
  }
}

void allToAllCase(Communicator& c, size_t scale, int style) {
  const int rank = c.rank(), n = c.size();
  std::vector<std::vector<int64_t>> ins(n), outs(n);
  std::vector<Span> inSpans, outSpans;
  for (int p = 0; p < n; ++p) {
    ins[p].resize(pairLength(rank, p, scale));
    for (size_t i = 0; i < ins[p].size(); ++i) ins[p][i] = payload(rank, p, 0, i);
    outs[p].assign(pairLength(p, rank, scale), -1);
    inSpans.push_back(Span{reinterpret_cast<char*>(ins[p].data()), ins[p].size()});
    outSpans.push_back(Span{reinterpret_cast<char*>(outs[p].data()), outs[p].size()});
  }
  runCall(c, style, [&] { return c.allToAll(inSpans, outSpans, DType::kInt64); });
  for (int p = 0; p < n; ++p) {
    EXPECT_EACH(outs[p].data(), outs[p].size(), [&](size_t i) { return payload(p, rank, 0, i); },
                "rank " << rank << "/" << n << " all-to-all: from rank " << p);
  }
}

// Calls issued back to back without waiting, then waited on in reverse order, each in
// another way; their buffers are checked once all are done.
void queuedCalls(Communicator& c, int round) {
  const int rank = c.rank(), n = c.size();
  struct Call {
    std::shared_ptr<Work> work;
    std::function<void()> verify;
  };
  std::deque<std::vector<float>> buffers;  // a deque: pushing keeps earlier buffers in place
  std::vector<Call> calls;
  for (int j = 0; j < 24; ++j) {
    switch (j % 4) {
      case 0: {
        const size_t count = j == 4 ? size_t{1} << 18 : 1 + j * 131;
        const Algo algo = kAllreduceAlgos[(j / 4 + round) % 4];
        auto& data = buffers.emplace_back(count);
        for (size_t i = 0; i < count; ++i) data[i] = value<float>(rank, i);
        calls.push_back({c.allReduce(data.data(), count, DType::kFloat32, ReduceOp::kSum, algo), [&data, n, algo] {
                           EXPECT_EACH(data.data(), data.size(),
                                       [&](size_t i) { return reduced<float>(ReduceOp::kSum, n, i); },
                                       "queued all-reduce " << pycollect::algoName(algo) << " count " << data.size());
                         }});
        break;
      }
      case 1: {
        const size_t count = 1 + j * 17;
        const Algo algo = j % 8 == 1 ? Algo::kRing : Algo::kBruck;
        auto& in = buffers.emplace_back(count);
        auto& out = buffers.emplace_back(count * n, -1.0f);
        for (size_t i = 0; i < count; ++i) in[i] = value<float>(rank, i);
        calls.push_back({c.allGather(in.data(), out.data(), count, DType::kFloat32, algo), [&out, count, algo] {
                           EXPECT_EACH(out.data(), out.size(),
                                       [&](size_t i) { return value<float>(static_cast<int>(i / count), i % count); },
                                       "queued all-gather " << pycollect::algoName(algo) << " count " << count);
                         }});
        break;
      }
      case 2: {
        const int root = (j / 4) % n;
        const size_t count = 1000 + j;
        auto& data = buffers.emplace_back(count, -1.0f);
        if (rank == root) {
          for (size_t i = 0; i < count; ++i) data[i] = value<float>(root, i);
        }
        calls.push_back({c.broadcast(data.data(), count, DType::kFloat32, root), [&data, root] {
                           EXPECT_EACH(data.data(), data.size(), [&](size_t i) { return value<float>(root, i); },
                                       "queued broadcast from " << root);
                         }});
        break;
      }
      default:
        calls.push_back({c.barrier(), [] { report().pass(); }});
        break;
    }
  }
  for (size_t k = calls.size(); k-- > 0;) {
    awaitWork(c, calls[k].work, static_cast<WaitMode>((k + rank) % kWaitModes));
  }
  for (auto& call : calls) call.verify();
}

// Calls issued from a completion hook (Work::whenDone), as a torch Future's callback issues
// them (PowerSGD): the hook runs on the thread that finished the call, often the worker, and
// waits there for the call it issued: the engine must run it on that thread
// (worker.cc, [Note: calls from a completion]) after what was queued before it.
void callsFromCompletions(Communicator& c, int round) {
  const int rank = c.rank(), n = c.size();
  const size_t count = round == 0 ? 8 : size_t{1} << 16;
  std::vector<float> first(count), second(count), queued(count);
  for (size_t i = 0; i < count; ++i) first[i] = second[i] = queued[i] = value<float>(rank, i);
  std::mutex mu;
  std::condition_variable cv;
  bool hookDone = false;
  std::string hookError;
  auto a = c.allReduce(first.data(), count, DType::kFloat32, ReduceOp::kSum, Algo::kAuto);
  // Queued behind the first call before the hook is set, so that on every rank it comes
  // before the hook's calls: the hook's thread runs it first when it drives (runHere), or the
  // worker does when the hook runs here, the first call already done.
  auto q = c.allReduce(queued.data(), count, DType::kFloat32, ReduceOp::kSum, Algo::kAuto);
  a->whenDone([&] {
    try {
      c.barrier()->wait(-1);
      c.allReduce(second.data(), count, DType::kFloat32, ReduceOp::kSum, Algo::kAuto)->wait(-1);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu);
      hookError = e.what();
    }
    std::lock_guard<std::mutex> lock(mu);
    hookDone = true;
    cv.notify_all();
  });
  a->wait(-1);
  {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT(cv.wait_for(lock, std::chrono::seconds(30), [&] { return hookDone; }),
           "rank " << rank << ": the completion hook's calls did not finish (round " << round << ")");
    EXPECT(hookError.empty(), "rank " << rank << ": the completion hook's call failed: " << hookError);
  }
  q->wait(-1);
  for (auto* data : {&first, &second, &queued}) {
    EXPECT_EACH(data->data(), count, [&](size_t i) { return reduced<float>(ReduceOp::kSum, n, i); },
                "calls from a completion, round " << round << ", rank " << rank);
  }
}

}  // namespace

void collectiveSweep(Communicator& c, const Sweep& sweep) {
  const int rank = c.rank(), n = c.size();
  int style = rank;
  stage() = "all-reduce";
  std::vector<Algo> algos(std::begin(kAllreduceAlgos), std::end(kAllreduceAlgos));
  if (sweep.shared) algos.push_back(Algo::kShared);
  for (Algo algo : algos) {
    for (size_t count : sweep.allreduceCounts) {
      allReduceCase<float>(c, algo, count, ReduceOp::kSum, style++);
      if (sweep.int64) allReduceCase<int64_t>(c, algo, count, ReduceOp::kSum, style++);
    }
    allReduceCase<int64_t>(c, algo, 7, ReduceOp::kMax, style++);
    allReduceCase<int64_t>(c, algo, 1000, algo == Algo::kRing ? ReduceOp::kBxor : ReduceOp::kBand, style++);
    allReduceCase<float>(c, algo, 1000, ReduceOp::kMin, style++);
    allReduceCase<float>(c, algo, 1001, ReduceOp::kAvg, style++);
  }
  stage() = "all-gather";
  for (Algo algo : {Algo::kRing, Algo::kBruck}) {
    for (size_t count : sweep.counts) {
      allGatherCase<float>(c, algo, count, false, style++);
      if (sweep.int64) allGatherCase<int64_t>(c, algo, count, true, style++);
    }
  }
  stage() = "reduce-scatter";
  for (size_t count : sweep.counts) {
    reduceScatterCase<float>(c, Algo::kRing, count, style++);
    if (sweep.int64) reduceScatterCase<int64_t>(c, Algo::kRing, count, style++);
  }
  stage() = "broadcast";
  for (int root = 0; root < n; ++root) {
    for (size_t count : sweep.counts) broadcastCase<float>(c, Algo::kRing, count, root, style++);
  }
  stage() = "barrier";
  for (int k = 0; k < 6; ++k) {
    runCall(c, style++, [&] { return c.barrier(k % 2 == 0 ? -1.0 : 30.0); });
    report().pass();
  }
  stage() = "reduce, gather, scatter";
  for (int root = 0; root < n; ++root) {
    reduceCase(c, 7, root, style++);
    reduceCase(c, size_t{1} << 16, root, style++);
    gatherCase(c, 3, root, style++);
    gatherCase(c, 4000, root, style++);
    scatterCase(c, 3, root, style++);
    scatterCase(c, 4000, root, style++);
  }
  stage() = "all-gather of counts that differ by rank";
  variedGatherCase(c, 3, style++);
  variedGatherCase(c, 20000, style++);
  stage() = "all-to-all";
  allToAllCase(c, 5, style++);
  allToAllCase(c, 20000, style++);
  stage() = "list forms";
  for (Algo algo : {Algo::kAuto, Algo::kRing, Algo::kBruck}) {
    for (size_t count : sweep.counts) {
      listFormCases(c, algo, count, style);
      style += 2;
    }
  }
  stage() = "coalesced";
  coalescedCases(c, Algo::kAuto, style++);
  coalescedCases(c, Algo::kRing, style++);
  stage() = "queued calls";
  for (int round = 0; round < 3; ++round) queuedCalls(c, round);
  stage() = "calls from completions";
  for (int round = 0; round < 2; ++round) callsFromCompletions(c, round);
}

void partCollectives() {
  Sweep sweep;
  sweep.allreduceCounts = {0, 1, 7, size_t{1} << 16, size_t{1} << 20};
  sweep.counts = {0, 1, 7, size_t{1} << 16};
  for (int n : {3, 4}) {
    GroupSpec spec;
    spec.size = n;
    runGroup(spec, [&](Communicator& c, Barrier&, int) { collectiveSweep(c, sweep); });
  }
}
}  // namespace driver
