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
//
// This file holds main: the arguments, the watchdog, and each part's line. The parts live
// in part_<name>.cc (parts.h declares them), with p2p_waits.cc, fault_storm.cc and the
// shared values.h, collective_cases.h and faults.h beside them.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "parts.h"

namespace driver {
namespace {

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
