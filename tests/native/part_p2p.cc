// The native driver's p2p part, on 2 and 3 ranks over TCP: storms of isend/irecv between
// every pair (mostly small messages, some empty, now and then 1 MiB) waited on in a
// scrambled order, a storm that mixes tags received out of the order sent, receives from
// any source, buffers larger than their messages and all-reduces between the posts, a
// token passed around the ring with blocking send and recv, recvAny from every peer
// followed by named receives, and the waits from several threads and against late
// senders of p2p_waits.cc; then a receiver thread per peer on 4 and 5 ranks. Every
// message's elements are checked (values.h). p2pSuite is also part_shm.cc's.
#include <deque>
#include <map>

#include "parts.h"
#include "values.h"

namespace driver {
namespace {

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

// Every rank sends each peer `messages` messages, message k with tag k % 4 (sizes as the
// storm's, so some go eagerly and some by rendezvous), and receives each peer's by tag,
// highest tag first, each into a buffer a few elements larger than its message; plus one
// message per peer with a tag of the round's, received from any source. All-reduces run
// between the posts, one asynchronous across them all. Each receive must get the message
// the rules name: the j-th receive for tag t from q gets q's j-th message with tag t.
void mixedStorm(Communicator& c, int messages, int round) {
  const int rank = c.rank(), n = c.size();
  constexpr int kTags = 4;
  const int anyTag = 100 + round;
  struct In {
    std::vector<int64_t> data;
    std::shared_ptr<pycollect::RecvWork> work;
    int from, k;
  };
  std::deque<In> ins;
  std::deque<std::vector<int64_t>> outs;
  std::vector<std::shared_ptr<Work>> sends;
  std::vector<float> sum(1000, 1.0f);
  auto async = c.allReduce(sum.data(), sum.size(), DType::kFloat32, ReduceOp::kSum, Algo::kAuto);
  for (int t = kTags - 1; t >= 0; --t) {
    for (int d = 1; d < n; ++d) {
      const int from = (rank + n - d) % n;
      for (int k = t; k < messages; k += kTags) {
        const size_t len = stormLength(k, from, rank);
        In& in = ins.emplace_back(In{std::vector<int64_t>(len + 3, -1), nullptr, from, k});
        in.work = c.recv(in.data.data(), in.data.size(), DType::kInt64, from, t);
      }
    }
    if (t == 2) {  // half the receives posted: a blocking all-reduce between them
      std::vector<float> x(16, 1.0f);
      blocking(c, [&] { return c.allReduce(x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, Algo::kAuto); });
      EXPECT(x[0] == static_cast<float>(n), "mixed storm: blocking all-reduce gave " << x[0]);
    }
  }
  std::vector<std::vector<int64_t>> anyIn(n - 1, std::vector<int64_t>(8, -1));
  std::vector<int32_t> anySource(n - 1, -1);
  std::vector<std::shared_ptr<Work>> anyWorks;
  for (int j = 0; j < n - 1; ++j) {
    anyWorks.push_back(c.recvAny(anyIn[j].data(), anyIn[j].size(), DType::kInt64, anyTag, &anySource[j]));
  }
  for (int d = 1; d < n; ++d) {
    const int to = (rank + d) % n;
    for (int k = 0; k < messages; ++k) {
      auto& out = outs.emplace_back(stormLength(k, rank, to));
      for (size_t i = 0; i < out.size(); ++i) out[i] = payload(rank, to, k, i);
      sends.push_back(c.send(out.data(), out.size(), DType::kInt64, to, k % kTags));
    }
    auto& one = outs.emplace_back(5);
    for (size_t i = 0; i < one.size(); ++i) one[i] = payload(rank, to, 1000 + round, i);
    sends.push_back(c.send(one.data(), one.size(), DType::kInt64, to, anyTag));
  }
  const size_t total = ins.size();
  for (size_t j = 0; j < total; ++j) {
    In& in = ins[(j * 7919) % total];
    awaitWork(c, in.work, static_cast<WaitMode>((j + rank) % kWaitModes));
  }
  for (auto& w : anyWorks) awaitWork(c, w, WaitMode::kSlices);
  for (auto& w : sends) awaitWork(c, w, WaitMode::kDriving);
  awaitWork(c, async, WaitMode::kSlices);
  EXPECT(sum[0] == static_cast<float>(n), "mixed storm: asynchronous all-reduce gave " << sum[0]);
  for (const In& in : ins) {
    const size_t len = stormLength(in.k, in.from, rank);
    EXPECT(in.work->source() == in.from && in.work->bytes() == len * sizeof(int64_t),
           "mixed storm: message " << in.k << " from " << in.from << " came from " << in.work->source()
                                   << " with " << in.work->bytes() << " bytes");
    EXPECT_EACH(in.data.data(), len, [&](size_t i) { return payload(in.from, rank, in.k, i); },
                "rank " << rank << "/" << n << " mixed storm: message " << in.k << " from " << in.from);
    EXPECT_EACH(in.data.data() + len, size_t{3}, [](size_t) { return int64_t{-1}; },
                "mixed storm: the rest of a larger buffer, message " << in.k << " from " << in.from);
  }
  std::vector<int32_t> seen(anySource);
  std::sort(seen.begin(), seen.end());
  for (int j = 0; j < n - 1; ++j) {
    const int s = anySource[j];
    EXPECT(seen[j] == (j < rank ? j : j + 1), "mixed storm: any-source receives came from ranks " << seen[j]);
    EXPECT_EACH(anyIn[j].data(), size_t{5}, [&](size_t i) { return payload(s, rank, 1000 + round, i); },
                "mixed storm: any-source receive " << j << " (from " << s << ")");
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

// Rank 0 receives from any source; every other rank sends it `each` messages, then one with
// another tag, which a named receive per peer, posted after them all, takes.
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

}  // namespace

void p2pSuite(Communicator& c, Barrier& barrier, int stormMessages) {
  stage() = "p2p storm";
  p2pStorm(c, stormMessages);
  stage() = "mixed storm";
  for (int round = 0; round < 3; ++round) mixedStorm(c, stormMessages / 3, round);
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

}  // namespace driver
