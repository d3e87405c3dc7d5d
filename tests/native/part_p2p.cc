// The native driver's p2p part, on 2 and 3 ranks over TCP: storms of isend/irecv between
// every pair (mostly small messages, some empty, now and then 1 MiB) waited on in a
// scrambled order, a token passed around the ring with blocking send and recv, recvAny
// from every peer followed by named receives, and the waits from several threads and
// against late senders of p2p_waits.cc; then a receiver thread per peer on 4 and 5 ranks.
// Every message's elements are checked (values.h). p2pSuite is also part_shm.cc's.
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

}  // namespace

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

}  // namespace driver
