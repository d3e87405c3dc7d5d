// What the faults part's files share (part_faults.cc, fault_storm.cc): how a killed rank
// dies, the plan of one killed-peer storm, and the limits a failure's notice must meet.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "harness.h"

namespace driver {

// How a killed rank dies: its own thread shuts it down or aborts it between two rounds of
// the storm, or another of its threads does so while its own thread issues and waits.
enum class Kill { kShutdown, kAbort, kShutdownAside, kAbortAside };
inline const char* killName(Kill k) {
  switch (k) {
    case Kill::kShutdown: return "shutdown";
    case Kill::kAbort: return "abort";
    case Kill::kShutdownAside: return "shutdown from another thread";
    case Kill::kAbortAside: return "abort from another thread";
  }
  return "?";
}

// Kills this rank as `kill` says (the thread it runs on is the caller's affair).
inline void killRank(Communicator& c, Kill kill) {
  if (kill == Kill::kShutdown || kill == Kill::kShutdownAside) {
    c.shutdown();
  } else {
    c.abort("driver: rank " + std::to_string(c.rank()) + " killed");
  }
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

inline int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// The slowest notice of a kill any storm saw (faultStorm records it, partFaults prints it).
inline std::atomic<int64_t> worstNoticeNs{0};

// One storm of p2p calls, all-reduces and barriers on every rank while plan.victim dies
// (fault_storm.cc).
void faultStorm(Communicator& c, Barrier& barrier, const FaultPlan& plan, std::atomic<int64_t>& killedAt);

}  // namespace driver
