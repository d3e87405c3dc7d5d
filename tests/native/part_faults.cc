// The native driver's faults part. Deadlines: an all-reduce (async and blocking), a
// barrier and a recv that nobody answers must throw TimeoutError soon after their
// deadline. Killed peers: --iterations storms (fault_storm.cc) on 2 or 3 ranks over TCP or
// shared memory, a random rank shut down or aborted at a random point (--seed); then half
// as many kills while the other rank's threads hand the links to each other in 1 ms
// waitDriving slices, every wait ending with an error within the limit; then a tenth as
// many 3-rank storms whose survivors shrink: abort, form a 2-rank group, all-reduce on it.
#include <algorithm>
#include <functional>
#include <random>

#include "faults.h"
#include "parts.h"
#include "values.h"

namespace driver {
namespace {

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
    killRank(c, kill);  // rank 1: "driver: rank 1 killed"
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

// After a killed-peer storm on 3 ranks (rank 2 the victim), the survivors shrink as
// pycollect/shrink.py does: each aborts its failed communicator and forms a 2-rank one
// with the other (renumbered 0 and 1: rank 2 was last), in the same process as the dying
// group, and all-reduces on it. The shared `next` carries the new group's addresses (and
// the storm's kill time).
struct Survivors {
  std::vector<std::string> hosts = std::vector<std::string>(2);
  std::vector<int> ports = std::vector<int>(2);
  Barrier met{2};
  uint64_t token = nextToken();
  std::atomic<int64_t> killedAt{0};  // the storm's: when the victim died, for every rank's check
};

void shrinkAfterKill(Communicator& c, Barrier& barrier, const FaultPlan& plan, Survivors& next) {
  faultStorm(c, barrier, plan, next.killedAt);
  const int rank = c.rank();
  if (rank == plan.victim) return;
  EXPECT(c.failed(), "rank " << rank << ": the group did not fail when rank " << plan.victim << " died");
  c.abort("shrunk: rank " + std::to_string(plan.victim) + " excluded");
  Communicator survivors(rank, 2, makeOptions(plan.transport, 60.0));
  const auto address = survivors.listen("127.0.0.1");
  next.hosts[rank] = address.first;
  next.ports[rank] = address.second;
  next.met.wait();  // both addresses published (and read after: the barrier orders it)
  survivors.connect(next.hosts, next.ports, next.token);
  std::vector<float> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = value<float>(rank, i);
  awaitWork(survivors, survivors.allReduce(data.data(), data.size(), DType::kFloat32, ReduceOp::kSum, Algo::kAuto),
            WaitMode::kSlices);
  EXPECT_EACH(data.data(), data.size(), [](size_t i) { return reduced<float>(ReduceOp::kSum, 2, i); },
              "rank " << rank << ": all-reduce of the shrunk group");
  next.met.wait();  // neither leaves (destroying its links) before the other's result
}

}  // namespace

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
  stage() = "shrink after a kill";
  const int shrinks = std::max(1, iterations / 10);
  for (int it = 0; it < shrinks; ++it) {
    FaultPlan plan;
    plan.size = 3;
    plan.transport = it % 2 == 1 ? TransportKind::kShm : TransportKind::kTcp;
    plan.victim = 2;
    plan.kill = static_cast<Kill>(rng() % 4);
    plan.stopRound = static_cast<int>(rng() % (kFaultRounds / 2));
    plan.asideDelayUs = static_cast<int>(rng() % 3000);
    GroupSpec spec;
    spec.size = 3;
    spec.options = [&plan](int) { return makeOptions(plan.transport, 60.0); };
    Survivors next;
    if (!runGroup(spec, [&](Communicator& c, Barrier& barrier, int) { shrinkAfterKill(c, barrier, plan, next); })) {
      std::fprintf(stderr, "faults: shrink iteration %d failed (rank 2 killed by %s)\n", it, killName(plan.kill));
      return;
    }
  }
  std::printf("faults: %d kills in storms (the slowest noticed by every rank after %.0f ms), %d during waiter churn, "
              "%d shrinks after a kill\n",
              iterations, worstNoticeNs.load() / 1e6, iterations / 2, shrinks);
}

}  // namespace driver
