// The native engine driver: runs the engine's calls with every rank a thread of this one
// process (harness.h), so that ThreadSanitizer, AddressSanitizer and UBSan
// (scripts/sanitize.sh) see all of the engine's threads and memory, and no Python.
// Every call's result is checked against a value computed here; a wrong result, an error
// where none belongs, or a wait that never ends makes the driver exit non-zero.
//
//   pycollect_engine_driver [--part NAME]... [--label L] [--iterations N] [--seed S]
//                           [--part-timeout SEC]
//
// Parts (no --part: all of them, in this order):
//   collectives  every collective on 3 and 4 ranks over TCP: the four all-reduce
//                algorithms on float32 and int64 (0 .. 1M elements), all-gather,
//                reduce-scatter, broadcast, barrier, reduce, gather, scatter, all-to-all,
//                coalesced; blocking calls under InlineScope, async calls queued back to back
//   p2p          storms of isend/irecv between every pair, blocking send/recv, recvAny,
//                several threads of one rank waiting (waitDriving) while others issue or
//                while another waiter drives, and 50 ms waitDriving slices against a
//                sender 300 ms late
//   faults       a rank shut down or aborted in the middle of a storm (--iterations
//                times, fresh groups; half as many while the peer's threads hand the links
//                to each other in 1 ms waitDriving slices): every other rank's calls end
//                with an error within seconds; deadlines: a collective, a barrier and a
//                recv nobody answers must throw TimeoutError
//   shm          collectives and p2p over shared memory (2 to 4 ranks)
//   hierarchy    4 ranks as 2 hosts x 2 (and 3 as 2 + 1): the hierarchical all-reduce,
//                all-gather, reduce-scatter and broadcast, pipelined at 16 MiB
//
// Each part prints "<label>: <part> ok (N checks, T s)"; --label defaults to
// "engine driver" (scripts/sanitize.sh passes "sanitize thread" and the like).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <map>

#include "harness.h"

namespace driver {
namespace {

// ---- Values -------------------------------------------------------------------------

template <typename T>
DType dtypeOf();
template <>
DType dtypeOf<float>() { return DType::kFloat32; }
template <>
DType dtypeOf<int64_t>() { return DType::kInt64; }

// Rank `rank`'s element i. Float32 values are small integers, so that every partial sum
// (whatever order an algorithm adds in) is exact; they vary with i so that a block that
// landed in the wrong place shows.
template <typename T>
T value(int rank, size_t i);
template <>
float value<float>(int rank, size_t i) { return static_cast<float>(rank + 1) + static_cast<float>(i % 65521); }
template <>
int64_t value<int64_t>(int rank, size_t i) { return int64_t{rank + 1} * 1000003 + static_cast<int64_t>(i); }

// The reduction over ranks 0..n-1 of element i (kAvg: the sum; the caller divides).
template <typename T>
T reduced(ReduceOp op, int n, size_t i) {
  T acc = value<T>(0, i);
  for (int r = 1; r < n; ++r) {
    const T v = value<T>(r, i);
    switch (op) {
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      default: acc += v; break;
    }
  }
  return acc;
}

constexpr size_t kNone = static_cast<size_t>(-1);

// The first i where data[i] != want(i), or kNone.
template <typename T, typename Want>
size_t firstMismatch(const T* data, size_t count, Want want) {
  for (size_t i = 0; i < count; ++i) {
    if (!(data[i] == want(i))) return i;
  }
  return kNone;
}

#define EXPECT_EACH(data, count, want, what)                                                        \
  do {                                                                                              \
    const size_t bad_ = firstMismatch((data), (count), (want));                                     \
    EXPECT(bad_ == kNone, what << ": element " << bad_ << " of " << (count) << " is " << (data)[bad_] \
                                << ", expected " << (want)(bad_));                                  \
  } while (0)

// A point-to-point message's element: who sent it to whom, its number, its index.
int64_t payload(int from, int to, int k, size_t i) {
  return (int64_t{from * 16 + to} << 40) | (int64_t{k} << 20) | static_cast<int64_t>(i & 0xFFFFF);
}

// Message k's length from `from` to `to` in a storm: mostly small (some empty), now and
// then 1 MiB, which no socket buffer holds at once.
size_t stormLength(int k, int from, int to) {
  if (k % 40 == 39) return size_t{1} << 17;
  return static_cast<size_t>((k * 37 + from * 11 + to * 5) % 300);
}

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

// ---- Collectives --------------------------------------------------------------------

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

void reduceCase(Communicator& c, size_t count, int root, int style) {
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

void coalescedCases(Communicator& c, Algo algo, int style) {
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

struct Sweep {
  std::vector<size_t> allreduceCounts;
  std::vector<size_t> counts;  // the other collectives'
  bool int64 = true;
};

void collectiveSweep(Communicator& c, const Sweep& sweep) {
  const int rank = c.rank(), n = c.size();
  int style = rank;
  stage() = "all-reduce";
  for (Algo algo : kAllreduceAlgos) {
    for (size_t count : sweep.allreduceCounts) {
      allReduceCase<float>(c, algo, count, ReduceOp::kSum, style++);
      if (sweep.int64) allReduceCase<int64_t>(c, algo, count, ReduceOp::kSum, style++);
    }
    allReduceCase<int64_t>(c, algo, 7, ReduceOp::kMax, style++);
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
  stage() = "all-to-all";
  allToAllCase(c, 5, style++);
  allToAllCase(c, 20000, style++);
  stage() = "coalesced";
  coalescedCases(c, Algo::kAuto, style++);
  coalescedCases(c, Algo::kRing, style++);
  stage() = "queued calls";
  for (int round = 0; round < 3; ++round) queuedCalls(c, round);
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

// ---- Point to point -----------------------------------------------------------------

// Every rank has `messages` sends and as many receives in flight with every peer at once
// (posted interleaved), then waits for them in a scrambled order, each in another way.
void p2pStorm(Communicator& c, int messages) {
  const int rank = c.rank(), n = c.size();
  struct Message {
    std::vector<int64_t> data;
    std::shared_ptr<Work> work;
    int peer, k;
    bool send;
  };
  std::deque<Message> all;
  for (int k = 0; k < messages; ++k) {
    for (int d = 1; d < n; ++d) {
      const int to = (rank + d) % n, from = (rank + n - d) % n;
      Message& in = all.emplace_back(Message{std::vector<int64_t>(stormLength(k, from, rank), -1), nullptr, from, k, false});
      in.work = c.recv(in.data.data(), in.data.size(), DType::kInt64, from, k % 5);
      Message& out = all.emplace_back(Message{std::vector<int64_t>(stormLength(k, rank, to)), nullptr, to, k, true});
      for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = payload(rank, to, k, i);
      out.work = c.send(out.data.data(), out.data.size(), DType::kInt64, to, k % 5);
    }
  }
  // 7919 is prime, so stepping by it visits every message once, in an order unlike the
  // one they were posted in.
  const size_t total = all.size();
  for (size_t j = 0; j < total; ++j) {
    Message& m = all[(j * 7919) % total];
    awaitWork(c, m.work, static_cast<WaitMode>((j + rank) % kWaitModes));
  }
  for (const Message& m : all) {
    if (m.send) continue;
    EXPECT_EACH(m.data.data(), m.data.size(), [&](size_t i) { return payload(m.peer, rank, m.k, i); },
                "rank " << rank << "/" << n << " storm: message " << m.k << " from " << m.peer);
  }
}

// A token passed around the ring with blocking send and recv (run inline, InlineScope).
void blockingRing(Communicator& c, int rounds) {
  const int rank = c.rank(), n = c.size();
  const int right = (rank + 1) % n, left = (rank + n - 1) % n;
  for (int round = 0; round < rounds; ++round) {
    const size_t count = round % 4 == 3 ? size_t{1} << 16 : 8;
    std::vector<int64_t> token(count), got(count, -1);
    auto send = [&] {
      for (size_t i = 0; i < count; ++i) token[i] = payload(rank, right, round, i);
      blocking(c, [&] { return c.send(token.data(), count, DType::kInt64, right, round % 3); });
    };
    auto recv = [&] {
      blocking(c, [&] { return c.recv(got.data(), count, DType::kInt64, left, round % 3); });
      EXPECT_EACH(got.data(), count, [&](size_t i) { return payload(left, rank, round, i); },
                  "rank " << rank << "/" << n << " blocking ring round " << round);
    };
    if (rank == 0) {
      send();
      recv();
    } else {
      recv();
      send();
    }
  }
}

// Rank 0 receives from any source; every other rank sends it `each` messages. Then one
// named receive per peer, which waits until the recvAny calls before it matched.
void recvAnyCase(Communicator& c, int each) {
  const int rank = c.rank(), n = c.size();
  constexpr size_t kLen = 16;
  constexpr int kTag = 42;
  if (rank == 0) {
    const int total = each * (n - 1);
    std::vector<std::vector<int64_t>> bufs(total, std::vector<int64_t>(kLen, -1));
    std::vector<int32_t> sources(total, -1);
    std::vector<std::shared_ptr<Work>> works;
    for (int j = 0; j < total; ++j) {
      if (j % 5 == 4) {  // now and then a blocking one: the ones before it run first
        blocking(c, [&] { return c.recvAny(bufs[j].data(), kLen, DType::kInt64, kTag, &sources[j]); });
        works.push_back(nullptr);
      } else {
        works.push_back(c.recvAny(bufs[j].data(), kLen, DType::kInt64, kTag, &sources[j]));
      }
    }
    std::vector<std::vector<int64_t>> tails(n, std::vector<int64_t>(kLen, -1));
    std::vector<std::shared_ptr<Work>> tailWorks(n);
    for (int p = 1; p < n; ++p) tailWorks[p] = c.recv(tails[p].data(), kLen, DType::kInt64, p, kTag + 1);
    for (int j = 0; j < total; ++j) {
      if (works[j]) awaitWork(c, works[j], static_cast<WaitMode>(j % kWaitModes));
    }
    std::map<int, int> next;  // each sender's messages arrive in the order sent
    for (int j = 0; j < total; ++j) {
      const int s = sources[j];
      EXPECT(s >= 1 && s < n, "recvAny " << j << ": source " << s);
      const int k = next[s]++;
      EXPECT_EACH(bufs[j].data(), kLen, [&](size_t i) { return payload(s, 0, k, i); },
                  "recvAny " << j << " (from " << s << ", its message " << k << ")");
    }
    for (int p = 1; p < n; ++p) {
      EXPECT(next[p] == each, "recvAny: " << next[p] << " messages from rank " << p << ", expected " << each);
      awaitWork(c, tailWorks[p], WaitMode::kSlices);
      EXPECT_EACH(tails[p].data(), kLen, [&](size_t i) { return payload(p, 0, 1000, i); },
                  "named recv after recvAny, from " << p);
    }
  } else {
    std::vector<std::vector<int64_t>> bufs(each + 1, std::vector<int64_t>(kLen));
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k <= each; ++k) {
      const int number = k < each ? k : 1000;
      for (size_t i = 0; i < kLen; ++i) bufs[k][i] = payload(rank, 0, number, i);
      works.push_back(c.send(bufs[k].data(), kLen, DType::kInt64, 0, k < each ? kTag : kTag + 1));
    }
    for (size_t k = 0; k < works.size(); ++k) awaitWork(c, works[k], static_cast<WaitMode>(k % kWaitModes));
  }
}

// Several threads of one rank at once: one receiver thread per peer waits on each recv
// (waitDriving, with and without InlineScope) while the rank's own thread issues sends to
// every peer and waits on them, and another thread reads the communicator's state.
void threadedWaits(Communicator& c, int messages) {
  const int rank = c.rank(), n = c.size();
  std::vector<std::thread> receivers;
  std::atomic<bool> failed{false};
  std::atomic<bool> stop{false};
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    receivers.emplace_back([&c, &failed, p, rank, messages] {
      try {
        for (int k = 0; k < messages; ++k) {
          std::vector<int64_t> got(stormLength(k, p, rank), -1);
          auto work = c.recv(got.data(), got.size(), DType::kInt64, p, 7);
          if (k % 3 == 0) {
            awaitWork(c, work, WaitMode::kDriving);
          } else if (k % 3 == 1) {
            InlineScope scope(true);
            awaitWork(c, work, WaitMode::kDriving);
          } else {
            awaitWork(c, work, WaitMode::kSlices);
          }
          EXPECT_EACH(got.data(), got.size(), [&](size_t i) { return payload(p, rank, k, i); },
                      "rank " << rank << " receiver thread: message " << k << " from " << p);
        }
      } catch (const std::exception& e) {
        if (!dynamic_cast<const CheckFailed*>(&e)) report().fail(std::string("receiver thread: ") + e.what());
        failed = true;
      }
    });
  }
  std::thread reader([&c, &stop] {  // the status calls any thread may make
    while (!stop.load()) {
      (void)c.failed();
      (void)c.counters();
      (void)c.linkKinds();
      (void)c.scratchBytes();
      (void)c.bytesSent();
      (void)c.flightRecord();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  try {
    std::deque<std::vector<int64_t>> sent;
    for (int k = 0; k < messages; ++k) {
      for (int d = 1; d < n; ++d) {
        const int to = (rank + d) % n;
        auto& data = sent.emplace_back(stormLength(k, rank, to));
        for (size_t i = 0; i < data.size(); ++i) data[i] = payload(rank, to, k, i);
        if (k % 3 == 2) {
          blocking(c, [&] { return c.send(data.data(), data.size(), DType::kInt64, to, 7); });
        } else {
          awaitWork(c, c.send(data.data(), data.size(), DType::kInt64, to, 7),
                    k % 3 == 0 ? WaitMode::kDriving : WaitMode::kSlices);
        }
      }
    }
  } catch (...) {
    stop = true;
    c.abort("driver: the sending thread failed");  // the receivers' waits end
    for (auto& t : receivers) t.join();
    reader.join();
    throw;
  }
  for (auto& t : receivers) t.join();
  stop = true;
  reader.join();
  EXPECT(!failed.load(), "rank " << rank << ": a receiver thread failed");
}

// A sender 300 ms late: every 50 ms waitDriving slice returns false promptly, and the last
// returns true once the bytes came. `collective`: the late call is an all-reduce instead.
void lateSender(Communicator& c, Barrier& barrier, bool inlineScope, bool collective) {
  const int rank = c.rank(), n = c.size();
  constexpr size_t kLen = 1000;
  barrier.wait();
  if (collective) {
    std::vector<float> data(kLen);
    for (size_t i = 0; i < kLen; ++i) data[i] = value<float>(rank, i);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      awaitWork(c, c.allReduce(data.data(), kLen, DType::kFloat32, ReduceOp::kSum, Algo::kRing), WaitMode::kWork);
    } else {
      auto work = c.allReduce(data.data(), kLen, DType::kFloat32, ReduceOp::kSum, Algo::kRing);
      const auto start = Clock::now();
      int slices = 0;
      for (;;) {
        const auto sliceStart = Clock::now();
        bool done = c.waitDriving(work, 0.05);  // no InlineScope: a collective would run whole
        if (done) break;
        ++slices;
        EXPECT(secondsSince(sliceStart) < 0.2, "a 50 ms waitDriving slice on a late all-reduce took "
                                                   << secondsSince(sliceStart) << " s");
        EXPECT(secondsSince(start) < kWaitLimitSec, "late all-reduce never completed");
      }
      EXPECT(rank != 0 || slices >= 2, "rank 0 waited only " << slices << " slices for a rank 300 ms late");
    }
    EXPECT_EACH(data.data(), kLen, [&](size_t i) { return reduced<float>(ReduceOp::kSum, n, i); },
                "late all-reduce");
    return;
  }
  if (rank == 1) {
    std::vector<int64_t> data(kLen);
    for (size_t i = 0; i < kLen; ++i) data[i] = payload(1, 0, 0, i);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    awaitWork(c, c.send(data.data(), kLen, DType::kInt64, 0, 9), WaitMode::kWork);
  } else if (rank == 0) {
    std::vector<int64_t> got(kLen, -1);
    auto work = c.recv(got.data(), kLen, DType::kInt64, 1, 9);
    const auto start = Clock::now();
    int slices = 0;
    for (;;) {
      const auto sliceStart = Clock::now();
      bool done;
      if (inlineScope) {
        InlineScope scope(true);
        done = c.waitDriving(work, 0.05);
      } else {
        done = c.waitDriving(work, 0.05);
      }
      if (done) break;
      ++slices;
      EXPECT(secondsSince(sliceStart) < 0.2,
             "a 50 ms waitDriving slice on a late recv took " << secondsSince(sliceStart) << " s");
      EXPECT(secondsSince(start) < kWaitLimitSec, "late recv never completed");
    }
    EXPECT(slices >= 2, "waited only " << slices << " slices for a sender 300 ms late");
    EXPECT(secondsSince(start) >= 0.2, "the late recv completed after " << secondsSince(start) << " s");
    EXPECT_EACH(got.data(), kLen, [&](size_t i) { return payload(1, 0, 0, i); }, "late recv");
  }
  barrier.wait();
}

// Two ranks: `threads` threads of rank 0 each post a recv from rank 1, then all wait in
// waitDriving at once while rank 1 sends the messages a few hundred microseconds apart:
// one waiter drives the links, and each message it takes completes another's recv.
// Every message arrives exactly once.
void manyWaiters(Communicator& c, Barrier& barrier, int threads, int rounds) {
  const int rank = c.rank();
  constexpr size_t kLen = 64;
  constexpr int kTag = 11;
  if (rank > 1) {
    for (int round = 0; round < rounds; ++round) {
      barrier.wait();
      barrier.wait();
    }
    return;
  }
  if (rank == 1) {
    std::vector<std::vector<int64_t>> data(threads, std::vector<int64_t>(kLen));
    for (int round = 0; round < rounds; ++round) {
      barrier.wait();  // rank 0's threads posted their recvs
      for (int t = 0; t < threads; ++t) {
        for (size_t i = 0; i < kLen; ++i) data[t][i] = payload(1, 0, round * threads + t, i);
        awaitWork(c, c.send(data[t].data(), kLen, DType::kInt64, 0, kTag), WaitMode::kWork);
        std::this_thread::sleep_for(std::chrono::microseconds(300));
      }
      barrier.wait();  // rank 0 has them all
    }
    return;
  }
  std::vector<std::vector<int64_t>> got(threads, std::vector<int64_t>(kLen));
  std::vector<std::shared_ptr<Work>> works(threads);
  std::vector<int> seen(static_cast<size_t>(rounds * threads), 0);
  Barrier local(threads + 1);
  std::atomic<bool> failed{false};
  std::vector<std::thread> waiters;
  for (int t = 0; t < threads; ++t) {
    waiters.emplace_back([&, t] {
      try {
        for (int round = 0; round < rounds; ++round) {
          local.wait();  // a round starts
          std::fill(got[t].begin(), got[t].end(), -1);
          works[t] = c.recv(got[t].data(), kLen, DType::kInt64, 1, kTag);
          local.wait();  // every thread posted
          if (t % 2 == 0) {
            awaitWork(c, works[t], WaitMode::kDriving);
          } else {
            awaitWork(c, works[t], WaitMode::kSlices);
          }
          local.wait();  // every thread has its message
        }
      } catch (const std::exception& e) {
        if (!dynamic_cast<const CheckFailed*>(&e)) report().fail(std::string("waiter thread: ") + e.what());
        failed = true;
        local.break_();
      }
    });
  }
  try {
    for (int round = 0; round < rounds; ++round) {
      local.wait();
      local.wait();
      barrier.wait();  // rank 1 sends now
      local.wait();
      for (int t = 0; t < threads; ++t) {
        const int k = static_cast<int>((got[t][0] >> 20) & 0xFFFFF);
        EXPECT(k >= round * threads && k < (round + 1) * threads && got[t][0] == payload(1, 0, k, 0),
               "many waiters, round " << round << ": thread " << t << " got element " << got[t][0]);
        EXPECT_EACH(got[t].data(), kLen, [&](size_t i) { return payload(1, 0, k, i); }, "many waiters message " << k);
        EXPECT(++seen[k] == 1, "many waiters: message " << k << " arrived twice");
      }
      barrier.wait();
    }
  } catch (...) {
    local.break_();
    c.abort("driver: many waiters failed");
    for (auto& w : waiters) w.join();
    throw;
  }
  for (auto& w : waiters) w.join();
  EXPECT(!failed.load(), "many waiters: a waiter thread failed");
}

void p2pSuite(Communicator& c, Barrier& barrier, int stormMessages) {
  stage() = "p2p storm";
  p2pStorm(c, stormMessages);
  stage() = "blocking ring";
  blockingRing(c, 20);
  stage() = "recvAny";
  recvAnyCase(c, 12);
  stage() = "threaded waits";
  threadedWaits(c, 40);
  stage() = "many waiters";
  manyWaiters(c, barrier, 4, 40);
  stage() = "late sender";
  lateSender(c, barrier, false, false);
  lateSender(c, barrier, true, false);
  lateSender(c, barrier, false, true);
}

void partP2P() {
  for (int n : {2, 3}) {
    GroupSpec spec;
    spec.size = n;
    runGroup(spec, [&](Communicator& c, Barrier& barrier, int) { p2pSuite(c, barrier, 150); });
  }
  // More threads of one rank in waitDriving at once: a receiver thread per peer.
  for (int n : {4, 5}) {
    GroupSpec spec;
    spec.size = n;
    runGroup(spec, [&](Communicator& c, Barrier&, int) {
      stage() = "threaded waits, many peers";
      threadedWaits(c, 60);
    });
  }
}

// ---- Faults -------------------------------------------------------------------------

// How a killed rank dies: its own thread shuts it down or aborts it between two rounds of
// the storm, or another of its threads does so while its own thread issues and waits.
enum class Kill { kShutdown, kAbort, kShutdownAside, kAbortAside };
const char* killName(Kill k) {
  switch (k) {
    case Kill::kShutdown: return "shutdown";
    case Kill::kAbort: return "abort";
    case Kill::kShutdownAside: return "shutdown from another thread";
    case Kill::kAbortAside: return "abort from another thread";
  }
  return "?";
}

struct FaultPlan {
  int size = 3;
  TransportKind transport = TransportKind::kTcp;
  int victim = 0;
  Kill kill = Kill::kShutdown;
  int stopRound = 0;     // own-thread kills: before this round
  int asideDelayUs = 0;  // kills from another thread: this long after the storm starts
};

constexpr int kFaultRounds = 12;
constexpr double kFaultWaitLimitSec = 30.0;  // past this a wait counts as a hang
constexpr double kNoticeLimitSec = 10.0;     // every rank's calls ended this soon after the kill

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

std::atomic<int64_t> worstNoticeNs{0};

void faultStorm(Communicator& c, Barrier& barrier, const FaultPlan& plan, std::atomic<int64_t>& killedAt) {
  const int rank = c.rank(), n = c.size();
  const bool victim = rank == plan.victim;
  const bool aside = plan.kill == Kill::kShutdownAside || plan.kill == Kill::kAbortAside;
  auto kill = [&] {
    killedAt = nowNs();
    if (plan.kill == Kill::kShutdown || plan.kill == Kill::kShutdownAside) {
      c.shutdown();
    } else {
      c.abort("driver: rank " + std::to_string(rank) + " killed");
    }
  };
  std::deque<std::vector<float>> buffers;
  std::vector<std::shared_ptr<Work>> works;
  int errors = 0;
  barrier.wait();
  std::thread killer;
  if (victim && aside) {
    killer = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(plan.asideDelayUs));
      kill();
    });
  }
  // The victim issues only part of the storm, so the others' later calls can only end
  // with the error its death causes.
  const int rounds = victim ? (aside ? kFaultRounds / 2 : plan.stopRound) : kFaultRounds;
  try {
    for (int round = 0; round < rounds; ++round) {
      for (int d = 1; d < n; ++d) {
        const int to = (rank + d) % n, from = (rank + n - d) % n;
        const size_t len = round % 4 == 1 ? size_t{1} << 16 : 16 + round;
        auto& in = buffers.emplace_back(len, -1.0f);
        works.push_back(c.recv(in.data(), len, DType::kFloat32, from, round));
        auto& out = buffers.emplace_back(len, static_cast<float>(rank));
        works.push_back(c.send(out.data(), len, DType::kFloat32, to, round));
      }
      auto& data = buffers.emplace_back(256, 1.0f);
      works.push_back(c.allReduce(data.data(), data.size(), DType::kFloat32, ReduceOp::kSum,
                                  kAllreduceAlgos[round % 4]));
      if (round % 5 == 4) works.push_back(c.barrier());
      if (round % 4 == 3) {
        auto& small = buffers.emplace_back(64, 1.0f);
        blocking(c, [&] {
          return c.allReduce(small.data(), small.size(), DType::kFloat32, ReduceOp::kSum, Algo::kAuto);
        });
      }
    }
  } catch (const pycollect::Error&) {
    ++errors;  // a call issued after the failure, or a blocking one it broke
  }
  if (victim && !aside) kill();
  // Every call ends, with its result or an error, within the limit: none hangs. Two
  // threads wait (the odd calls on a helper), so that the failure finds a waiter in
  // waitDriving besides the one that drives.
  std::atomic<int> helperErrors{0};
  std::string helperFailure;
  std::thread helper([&] {
    try {
      for (size_t k = 1; k < works.size(); k += 2) {
        try {
          awaitWork(c, works[k], static_cast<WaitMode>((k + rank) % kWaitModes), kFaultWaitLimitSec);
        } catch (const pycollect::Error&) {
          ++helperErrors;
        }
      }
    } catch (const std::exception& e) {
      helperFailure = e.what();  // a hang (CheckFailed, already recorded)
    }
  });
  try {
    for (size_t k = 0; k < works.size(); k += 2) {
      try {
        awaitWork(c, works[k], static_cast<WaitMode>((k + rank) % kWaitModes), kFaultWaitLimitSec);
      } catch (const pycollect::Error&) {
        ++errors;
      }
    }
  } catch (...) {
    helper.join();
    if (killer.joinable()) killer.join();
    throw;
  }
  helper.join();
  errors += helperErrors.load();
  if (!helperFailure.empty()) {
    if (killer.joinable()) killer.join();
    throw CheckFailed(helperFailure);
  }
  const int64_t doneAt = nowNs();
  if (killer.joinable()) killer.join();
  if (!victim) {
    EXPECT(errors > 0, "rank " << rank << "/" << n << ": no call failed although rank " << plan.victim
                                << " was killed (" << killName(plan.kill) << ")");
    EXPECT(c.failed(), "rank " << rank << ": the group is not failed after rank " << plan.victim << " was killed");
    const int64_t notice = doneAt - killedAt.load();
    int64_t worst = worstNoticeNs.load();
    while (notice > worst && !worstNoticeNs.compare_exchange_weak(worst, notice)) {
    }
    EXPECT(notice < static_cast<int64_t>(kNoticeLimitSec * 1e9),
           "rank " << rank << ": its calls ended " << notice / 1e9 << " s after rank " << plan.victim << "'s "
                   << killName(plan.kill));
  }
  buffers.clear();  // as Python drops a failed call's buffers while the group still lives
}

// A call nobody answers must fail with a TimeoutError once its deadline passes.
void deadlineCase(const char* what, double groupTimeout,
                  const std::function<std::shared_ptr<Work>(Communicator&, std::vector<float>&)>& issue,
                  bool blockingIssue) {
  GroupSpec spec;
  spec.size = 2;
  spec.options = [groupTimeout](int) { return makeOptions(TransportKind::kTcp, groupTimeout); };
  runGroup(spec, [&](Communicator& c, Barrier& barrier, int rank) {
    if (rank == 0) {
      std::vector<float> data(1000, 1.0f);
      const auto start = Clock::now();
      bool timedOut = false;
      std::string other;
      try {
        if (blockingIssue) {
          blocking(c, [&] { return issue(c, data); });
        } else {
          awaitWork(c, issue(c, data), WaitMode::kSlices);
        }
      } catch (const pycollect::TimeoutError&) {
        timedOut = true;
      } catch (const pycollect::Error& e) {
        other = e.what();
      }
      const double took = secondsSince(start);
      EXPECT(timedOut, what << ": expected a TimeoutError, got " << (other.empty() ? "success" : other));
      EXPECT(took < 10.0, what << ": the timeout came after " << took << " s");
    }
    barrier.wait();  // rank 1 never calls; it leaves once rank 0 has its error
  });
}

// Two ranks: rank 0's threads wait on recvs that never come in 1 ms waitDriving slices,
// so the links change hands between them and the worker all the time, while rank 1 dies
// (shut down or aborted) after `delayUs`. Every wait ends with an error within the limit.
void churnKill(Communicator& c, Barrier& barrier, Kill kill, int delayUs) {
  const int rank = c.rank();
  constexpr int kThreads = 3;
  std::vector<std::vector<float>> bufs(kThreads, std::vector<float>(32));
  std::vector<std::shared_ptr<Work>> works;
  if (rank == 0) {  // posted before rank 1's clock starts: the kill never finds them unissued
    for (int t = 0; t < kThreads; ++t) works.push_back(c.recv(bufs[t].data(), 32, DType::kFloat32, 1, t));
  }
  barrier.wait();
  if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::microseconds(delayUs));
    if (kill == Kill::kShutdown || kill == Kill::kShutdownAside) {
      c.shutdown();
    } else {
      c.abort("driver: rank 1 killed");
    }
    return;
  }
  std::atomic<int> errors{0}, hangs{0};
  std::vector<std::thread> waiters;
  for (int t = 0; t < kThreads; ++t) {
    waiters.emplace_back([&, t] {
      const auto start = Clock::now();
      try {
        while (!c.waitDriving(works[t], 0.001)) {
          if (secondsSince(start) > kFaultWaitLimitSec) {
            ++hangs;
            return;
          }
        }
      } catch (const pycollect::Error&) {
        ++errors;
      }
    });
  }
  for (auto& w : waiters) w.join();
  EXPECT(hangs.load() == 0, hangs.load() << " recvs still waiting " << kFaultWaitLimitSec << " s after rank 1 died ("
                                         << killName(kill) << ")");
  EXPECT(errors.load() == kThreads, "only " << errors.load() << " of " << kThreads
                                            << " recvs failed after rank 1 died (" << killName(kill) << ")");
}

void partFaults(int iterations, uint32_t seed) {
  stage() = "deadlines";
  deadlineCase("all-reduce with a 0.5 s timeout, peer absent", 0.5,
               [](Communicator& c, std::vector<float>& d) {
                 return c.allReduce(d.data(), d.size(), DType::kFloat32, ReduceOp::kSum, Algo::kRing);
               },
               false);
  deadlineCase("blocking all-reduce (inline) with a 0.5 s timeout, peer absent", 0.5,
               [](Communicator& c, std::vector<float>& d) {
                 return c.allReduce(d.data(), d.size(), DType::kFloat32, ReduceOp::kSum, Algo::kDirect);
               },
               true);
  deadlineCase("barrier(0.3 s), peer absent", 120.0, [](Communicator& c, std::vector<float>&) { return c.barrier(0.3); },
               false);
  deadlineCase("recv with a 0.5 s timeout, sender absent", 0.5,
               [](Communicator& c, std::vector<float>& d) { return c.recv(d.data(), d.size(), DType::kFloat32, 1, 0); },
               false);

  stage() = "killed peers";
  std::mt19937 rng(seed);
  for (int it = 0; it < iterations; ++it) {
    FaultPlan plan;
    plan.size = 2 + it % 2;
    plan.transport = it % 3 == 2 ? TransportKind::kShm : TransportKind::kTcp;
    plan.victim = static_cast<int>(rng() % plan.size);
    plan.kill = static_cast<Kill>(rng() % 4);
    plan.stopRound = static_cast<int>(rng() % (kFaultRounds / 2));
    plan.asideDelayUs = static_cast<int>(rng() % 3000);
    GroupSpec spec;
    spec.size = plan.size;
    spec.options = [&plan](int) { return makeOptions(plan.transport, 60.0); };
    std::atomic<int64_t> killedAt{0};
    const bool ok = runGroup(spec, [&](Communicator& c, Barrier& barrier, int) { faultStorm(c, barrier, plan, killedAt); });
    if (!ok) {
      std::fprintf(stderr, "faults: iteration %d failed (%d ranks over %s, rank %d killed by %s, round %d, %d us)\n",
                   it, plan.size, plan.transport == TransportKind::kShm ? "shm" : "tcp", plan.victim,
                   killName(plan.kill), plan.stopRound, plan.asideDelayUs);
      return;
    }
  }
  stage() = "kills during waiter churn";
  for (int it = 0; it < iterations / 2; ++it) {
    const Kill kill = rng() % 2 ? Kill::kShutdown : Kill::kAbort;
    const int delayUs = static_cast<int>(rng() % 5000);
    GroupSpec spec;
    spec.size = 2;
    const TransportKind transport = it % 3 == 2 ? TransportKind::kShm : TransportKind::kTcp;
    spec.options = [transport](int) { return makeOptions(transport, 60.0); };
    if (!runGroup(spec, [&](Communicator& c, Barrier& barrier, int) { churnKill(c, barrier, kill, delayUs); })) {
      std::fprintf(stderr, "faults: churn iteration %d failed (rank 1 killed by %s after %d us)\n", it,
                   killName(kill), delayUs);
      return;
    }
  }
  std::printf("faults: %d kills in storms (the slowest noticed by every rank after %.0f ms), %d during waiter churn\n",
              iterations, worstNoticeNs.load() / 1e6, iterations / 2);
}

// ---- Shared memory and the hierarchy ------------------------------------------------

void expectLinks(Communicator& c, const std::function<std::string(int peer)>& want) {
  for (const auto& [peer, kind] : c.linkKinds()) {
    EXPECT(kind == want(peer), "rank " << c.rank() << ": the link to rank " << peer << " is " << kind << ", expected "
                                       << want(peer));
  }
}

void partShm() {
  Sweep sweep;
  sweep.allreduceCounts = {0, 7, size_t{1} << 16, size_t{1} << 20};
  sweep.counts = {0, 7, size_t{1} << 16};
  sweep.int64 = false;
  for (int n : {2, 3, 4}) {
    GroupSpec spec;
    spec.size = n;
    spec.options = [](int) { return makeOptions(TransportKind::kShm); };
    runGroup(spec, [&](Communicator& c, Barrier& barrier, int) {
      expectLinks(c, [](int) { return "shm"; });
      if (n != 3) collectiveSweep(c, sweep);
      if (n != 4) p2pSuite(c, barrier, 100);
    });
  }
}

void hierarchicalCases(Communicator& c) {
  const int n = c.size();
  int style = c.rank();
  const size_t big = size_t{4} << 20;  // 16 MiB of float32: pipelined in pieces
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
      o.tunables.segmentBytes = 64 << 10;  // 16 MiB is then pipelined in its 16 pieces
      return o;
    };
    runGroup(spec, [&](Communicator& c, Barrier&, int rank) {
      expectLinks(c, [&](int peer) { return hostOf[peer] == hostOf[rank] ? "shm" : "tcp"; });
      hierarchicalCases(c);
    });
  }
}

// ---- Main ---------------------------------------------------------------------------

struct Part {
  const char* name;
  std::function<void()> run;
};

int usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: pycollect_engine_driver [--part collectives|p2p|faults|shm|hierarchy]... "
               "[--label L] [--iterations N] [--seed S] [--part-timeout SEC]\n",
               why);
  return 2;
}

}  // namespace
}  // namespace driver

int main(int argc, char** argv) {
  using namespace driver;
  std::vector<std::string> wanted;
  std::string label = "engine driver";
  int iterations = 200;
  uint32_t seed = 1;
  double partTimeout = 600;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (arg == "--part" && (v = next())) {
      wanted.push_back(v);
    } else if (arg == "--label" && (v = next())) {
      label = v;
    } else if (arg == "--iterations" && (v = next())) {
      iterations = std::atoi(v);
    } else if (arg == "--seed" && (v = next())) {
      seed = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (arg == "--part-timeout" && (v = next())) {
      partTimeout = std::atof(v);
    } else {
      return usage(("unknown or incomplete argument: " + arg).c_str());
    }
  }
  const std::vector<Part> parts = {
      {"collectives", partCollectives},
      {"p2p", partP2P},
      {"faults", [&] { partFaults(iterations, seed); }},
      {"shm", partShm},
      {"hierarchy", partHierarchy},
  };
  if (wanted.empty()) {
    for (const Part& p : parts) wanted.push_back(p.name);
  }
  std::vector<const Part*> chosen;
  for (const std::string& w : wanted) {
    auto it = std::find_if(parts.begin(), parts.end(), [&](const Part& p) { return w == p.name; });
    if (it == parts.end()) return usage(("no part named " + w).c_str());
    chosen.push_back(&*it);
  }

  // The watchdog: a part that runs past --part-timeout is a hang (a wait that never ends
  // would otherwise hold CI until its own limit).
  std::mutex watchMu;
  std::condition_variable watchCv;
  const char* watched = nullptr;
  auto watchedSince = Clock::now();
  bool finished = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(watchMu);
    while (!finished) {
      watchCv.wait_for(lock, std::chrono::milliseconds(500));
      if (watched != nullptr && secondsSince(watchedSince) > partTimeout) {
        std::fprintf(stderr, "%s: %s HUNG: still running after %.0f s (at: %s)\n", label.c_str(), watched,
                     partTimeout, stage().load());
        std::fflush(stderr);
        std::_Exit(3);
      }
    }
  });

  int failedParts = 0;
  for (const Part* part : chosen) {
    const uint64_t checksBefore = report().checks();
    const size_t failuresBefore = report().failures().size();
    const auto start = Clock::now();
    {
      std::lock_guard<std::mutex> lock(watchMu);
      watched = part->name;
      watchedSince = start;
    }
    stage() = part->name;
    try {
      part->run();
    } catch (const std::exception& e) {
      report().fail(std::string(part->name) + ": " + e.what());
    }
    const uint64_t checks = report().checks() - checksBefore;
    const size_t failures = report().failures().size() - failuresBefore;
    if (failures == 0) {
      std::printf("%s: %s ok (%llu checks, %.1f s)\n", label.c_str(), part->name,
                  static_cast<unsigned long long>(checks), secondsSince(start));
    } else {
      ++failedParts;
      std::printf("%s: %s FAILED (%zu failed, %llu checks passed, %.1f s)\n", label.c_str(), part->name, failures,
                  static_cast<unsigned long long>(checks), secondsSince(start));
    }
    std::fflush(stdout);
  }
  {
    std::lock_guard<std::mutex> lock(watchMu);
    finished = true;
    watched = nullptr;
  }
  watchCv.notify_all();
  watchdog.join();
  return failedParts == 0 ? 0 : 1;
}
