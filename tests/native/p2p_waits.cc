// The p2p suite's waits (part_p2p.cc runs them, and part_shm.cc through it): several
// threads of one rank waiting on their recvs (waitDriving, with and without InlineScope)
// while another issues sends and another reads the communicator's state; many threads
// of one rank in waitDriving at once while one drives the links, each message arriving
// exactly once; and 50 ms waitDriving slices against a sender (or an all-reduce peer)
// 300 ms late, each slice returning promptly and the last once the bytes came.
#include <algorithm>
#include <deque>

#include "parts.h"
#include "values.h"

namespace driver {
namespace {

// Waits on the late call `what` in 50 ms waitDriving slices (under InlineScope if
// `inlineScope`), each of which must return promptly, until it is done; returns how many
// slices ended before it was. `start`: when the wait began.
int waitInSlices(Communicator& c, const std::shared_ptr<Work>& work, bool inlineScope, const char* what,
                 Clock::time_point start) {
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
    if (done) return slices;
    ++slices;
    EXPECT(secondsSince(sliceStart) < 0.2,
           "a 50 ms waitDriving slice on a " << what << " took " << secondsSince(sliceStart) << " s");
    EXPECT(secondsSince(start) < kWaitLimitSec, what << " never completed");
  }
}

}  // namespace

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
      // No InlineScope: a collective would run whole.
      const int slices = waitInSlices(c, work, false, "late all-reduce", Clock::now());
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
    const int slices = waitInSlices(c, work, inlineScope, "late recv", start);
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

}  // namespace driver
