// The faults part's killed-peer storm (part_faults.cc runs it --iterations times): every
// rank keeps p2p calls, all-reduces on each algorithm, barriers and blocking calls in
// flight while one rank is shut down or aborted, by its own thread between two rounds or
// by another of its threads in the middle. Every other rank's calls must end, with their
// result or an error, within seconds; at least one must fail and the group must be failed.
#include <deque>
#include <thread>

#include "collective_cases.h"
#include "faults.h"

namespace driver {
namespace {

// Waits on works[first], works[first + 2], ...: each ends with its result or an error,
// counted in `errors`; a wait past the limit fails its check (a hang) and throws.
void awaitEveryOther(Communicator& c, const std::vector<std::shared_ptr<Work>>& works, size_t first,
                     std::atomic<int>& errors) {
  for (size_t k = first; k < works.size(); k += 2) {
    try {
      awaitWork(c, works[k], static_cast<WaitMode>((k + c.rank()) % kWaitModes), kFaultWaitLimitSec);
    } catch (const pycollect::Error&) {
      ++errors;
    }
  }
}

}  // namespace

void faultStorm(Communicator& c, Barrier& barrier, const FaultPlan& plan, std::atomic<int64_t>& killedAt) {
  const int rank = c.rank(), n = c.size();
  const bool victim = rank == plan.victim;
  const bool aside = plan.kill == Kill::kShutdownAside || plan.kill == Kill::kAbortAside;
  auto kill = [&] {
    killedAt = nowNs();
    killRank(c, plan.kill);
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
      awaitEveryOther(c, works, 1, helperErrors);
    } catch (const std::exception& e) {
      helperFailure = e.what();  // a hang (CheckFailed, already recorded)
    }
  });
  std::atomic<int> ownErrors{0};
  try {
    awaitEveryOther(c, works, 0, ownErrors);
    errors += ownErrors.load();
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

}  // namespace driver
