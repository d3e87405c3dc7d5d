// The native engine driver's harness (engine_driver.cc): a group's ranks as threads of
// one process, as Gloo's own tests run them, so that a sanitizer (scripts/sanitize.sh)
// sees the whole engine and nothing of CPython.
//
// runGroup forms a group the way pycollect/formation.py does (each rank constructs its
// Communicator, listens, publishes its address, sets its topology, then every rank
// connects at once) and runs a body on every rank. Checks count towards the part's
// summary; a failed one records its message and throws CheckFailed, which ends that
// rank's body and aborts its communicator, so its peers fail instead of waiting for it.
// awaitWork waits in each of the ways the Python layer does (pycollect/work.py), and
// blocking() issues a call as Group.run_blocking does: under an InlineScope, then waits.
// expectLinks checks the transport of each of a rank's links.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"

namespace driver {

using pycollect::Algo;
using pycollect::CommOptions;
using pycollect::Communicator;
using pycollect::DType;
using pycollect::InlineScope;
using pycollect::ReduceOp;
using pycollect::Span;
using pycollect::TransportKind;
using pycollect::Work;
using Clock = std::chrono::steady_clock;

// How long a wait may take before the driver calls it a hang (a sanitized build is slow,
// and two cores are shared; a healthy wait takes milliseconds).
constexpr double kWaitLimitSec = 60.0;

inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A failed check: ends the rank's body (runGroup records it).
class CheckFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a part found: how many checks passed, and every failure's message.
class Report {
 public:
  void pass() { checks_.fetch_add(1, std::memory_order_relaxed); }
  void fail(const std::string& message) {
    std::lock_guard<std::mutex> lock(mu_);
    failures_.push_back(message);
    std::fprintf(stderr, "CHECK FAILED: %s\n", message.c_str());
  }
  uint64_t checks() const { return checks_.load(); }
  std::vector<std::string> failures() {
    std::lock_guard<std::mutex> lock(mu_);
    return failures_;
  }

 private:
  std::atomic<uint64_t> checks_{0};
  std::mutex mu_;
  std::vector<std::string> failures_;
};

inline Report& report() {
  static Report r;
  return r;
}

// What the driver is doing now, for the watchdog's message on a hang.
inline std::atomic<const char*>& stage() {
  static std::atomic<const char*> s{"starting"};
  return s;
}

// EXPECT(cond, a << b): counts a passed check, or records the streamed message and
// throws CheckFailed. The message is only built on failure.
#define EXPECT(cond, message)                                                     \
  do {                                                                            \
    if (cond) {                                                                   \
      ::driver::report().pass();                                                  \
    } else {                                                                      \
      std::ostringstream expect_os_;                                              \
      expect_os_ << __FILE__ << ":" << __LINE__ << ": " << message;               \
      ::driver::report().fail(expect_os_.str());                                  \
      throw ::driver::CheckFailed(expect_os_.str());                              \
    }                                                                             \
  } while (0)

// A reusable barrier for the ranks' threads (std::barrier is C++20). break_() makes every
// present and later wait throw, so a rank that failed never leaves the others waiting.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (broken_) throw CheckFailed("barrier broken: another rank failed");
    const uint64_t generation = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation || broken_; });
    if (generation_ == generation) throw CheckFailed("barrier broken: another rank failed");
  }
  void break_() {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int n_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
};

// A token new to each group (the engine's handshake refuses a stale one).
inline uint64_t nextToken() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t base = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  return (base + (counter.fetch_add(1) << 8)) & ((uint64_t{1} << 63) - 1);
}

// Options for a group of the driver: a deadline that turns a hang into an error long
// before the watchdog, `transport`, and every rank on one host unless a tag says otherwise.
inline CommOptions makeOptions(TransportKind transport, double timeoutSec = 120.0) {
  CommOptions o;
  o.transport = transport;
  o.timeoutSec = timeoutSec;
  o.hostTag = "driver";
  return o;
}

struct GroupSpec {
  int size = 2;
  std::function<CommOptions(int rank)> options = [](int) { return makeOptions(TransportKind::kTcp); };
  std::vector<int> hostOf;  // non-empty: setTopology(hostOf, from) before connect
  pycollect::HierarchicalFrom from;
  bool finalBarrier = true;  // ranks meet before any destroys its communicator
};

// Forms the group (one thread per rank) and runs body(comm, barrier, rank) on every rank;
// returns once every rank's thread has destroyed its communicator. False if any rank
// failed (the failure is in report()).
inline bool runGroup(const GroupSpec& spec,
                     const std::function<void(Communicator&, Barrier&, int)>& body) {
  const int n = spec.size;
  std::vector<std::string> hosts(n);
  std::vector<int> ports(n);
  Barrier barrier(n);
  const uint64_t token = nextToken();
  std::atomic<bool> ok{true};
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<Communicator> comm;
      try {
        comm = std::make_unique<Communicator>(rank, n, spec.options(rank));
        auto address = comm->listen("127.0.0.1");
        hosts[rank] = address.first;
        ports[rank] = address.second;
        if (!spec.hostOf.empty()) comm->setTopology(spec.hostOf, spec.from);
        barrier.wait();  // every address published (and read after: the barrier's lock orders it)
        comm->connect(hosts, ports, token);
        body(*comm, barrier, rank);
        if (spec.finalBarrier) barrier.wait();
      } catch (const CheckFailed& e) {
        ok = false;  // recorded where it was thrown (or a barrier another rank broke)
        barrier.break_();
        if (comm) comm->abort(std::string("driver: rank failed a check: ") + e.what());
      } catch (const std::exception& e) {
        ok = false;
        report().fail("rank " + std::to_string(rank) + " of " + std::to_string(n) + ": " + e.what());
        barrier.break_();
        if (comm) comm->abort(std::string("driver: rank failed: ") + e.what());
      }
      comm.reset();
    });
  }
  for (auto& t : threads) t.join();
  return ok.load();
}

enum class WaitMode {
  kWork,     // Work::wait
  kDriving,  // Communicator::waitDriving, one call
  kSlices,   // as pycollect.Work.wait: waitDriving in 50 ms slices under InlineScope(true)
};
constexpr int kWaitModes = 3;

inline const char* waitModeName(WaitMode m) {
  switch (m) {
    case WaitMode::kWork: return "Work::wait";
    case WaitMode::kDriving: return "waitDriving";
    case WaitMode::kSlices: return "waitDriving slices";
  }
  return "?";
}

// Waits for `work`; rethrows its error; a wait past `limitSec` fails the check (a hang).
inline void awaitWork(Communicator& c, const std::shared_ptr<Work>& work, WaitMode mode,
                      double limitSec = kWaitLimitSec) {
  bool done = false;
  switch (mode) {
    case WaitMode::kWork:
      done = work->wait(limitSec);
      break;
    case WaitMode::kDriving:
      done = c.waitDriving(work, limitSec);
      break;
    case WaitMode::kSlices: {
      InlineScope scope(true);
      const auto start = Clock::now();
      while (!(done = c.waitDriving(work, 0.05))) {
        if (secondsSince(start) > limitSec) break;
      }
      break;
    }
  }
  EXPECT(done, work->what() << ": not done after " << limitSec << " s (" << waitModeName(mode) << ")");
}

// A blocking call as Group.run_blocking makes it: issued under an InlineScope (the engine
// may run it on this thread), then waited on in slices.
template <typename Issue>
void blocking(Communicator& c, Issue issue) {
  std::shared_ptr<Work> work;
  {
    InlineScope scope(true);
    work = issue();
  }
  awaitWork(c, work, WaitMode::kSlices);
}

// Checks that every link of this rank is of the kind want(peer) ("tcp", "shm").
inline void expectLinks(Communicator& c, const std::function<std::string(int peer)>& want) {
  for (const auto& [peer, kind] : c.linkKinds()) {
    EXPECT(kind == want(peer), "rank " << c.rank() << ": the link to rank " << peer << " is " << kind << ", expected "
                                       << want(peer));
  }
}

}  // namespace driver
