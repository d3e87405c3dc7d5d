// A handle on one queued operation: wait for it, poll it, or collect its error.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/wire_header.h"
#include "trace/flight.h"

namespace pycollect {

class Work {
 public:
  explicit Work(std::string what) : what_(std::move(what)), described_(true) {}
  // A collective's or a message's Work: what() says "rank <rank> <the call>", written only when first
  // asked (errors, Python's Work.what), not on every call's path.
  Work(int rank, const WireHeader& call) : rank_(rank), call_(call) {}
  virtual ~Work() = default;

  // Blocks until the op finished or `timeoutSec` passed (< 0: no limit). Returns
  // false on timeout; rethrows the op's error if it failed.
  bool wait(double timeoutSec);
  bool isCompleted();
  bool failed();
  const std::string& what() const;

  // The first call decides the outcome; later ones (a second error) are ignored.
  void finish(std::exception_ptr error);
  // The same, except that the completion hooks (whenDone) do not run now: runHooks() runs
  // them later, or a wait() does on its own thread, whichever comes first. For a Work that
  // completes inside another call's wait, where a hook that issued calls could not run them
  // (comm/p2p.h: a message received while a collective runs).
  void finishDeferred(std::exception_ptr error);
  // Runs the hooks finishDeferred left, once, on this thread; nothing if none are left.
  void runHooks();
  // Runs `fn` once the op finished (its outcome then settled: wait() returns or throws at
  // once): on this thread now if it already has, else on the thread that finishes it,
  // after finished(), or, for a Work finished with finishDeferred, on the thread that runs
  // its hooks (the group's driving thread, or one that waits for the Work). That thread
  // may be the one driving the group's links; `fn` may issue further calls on the group
  // (Communicator::enqueue runs them there, in order: see worker.cc, [Note: calls from a
  // completion]), but must not wait for another thread.
  void whenDone(std::function<void()> fn);
  // Its entry in the group's flight recorder (trace/flight.h): finish() ends it.
  void setFlight(flight::Mark mark) { flight_ = mark; }
  const flight::Mark& flight() const { return flight_; }

 protected:
  // Runs once, on the thread that finished the op, after waiters were woken.
  virtual void finished(bool /*failed*/) {}

 private:
  mutable std::string what_;
  mutable std::once_flag describe_;
  bool described_ = false;  // what_ given at construction
  int rank_ = -1;
  WireHeader call_{};
  std::mutex mu_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  // 0 running, 1 done, 2 failed (error_ set): stored once, under mu_ (waiters' predicate)
  // after error_, and read without it where only the outcome is asked (isCompleted, failed:
  // each small call asks both).
  std::atomic<uint8_t> outcome_{0};
  bool done() const { return outcome_.load(std::memory_order_acquire) != 0; }
  // Sets the outcome (the first time), wakes the waiters and runs finished(); returns the
  // hooks to run, which stay in whenDone_ for runHooks() if `deferHooks`.
  std::vector<std::function<void()>> complete(std::exception_ptr error, bool deferHooks);

  // (under mu_) Run by finish(); after finishDeferred, left here for runHooks() (or wait()).
  std::vector<std::function<void()>> whenDone_;
  flight::Mark flight_;
};

// A receive's Work: once it completed, which rank sent the message it received and how
// many bytes that message had (a receive buffer may be larger than the message).
class RecvWork : public Work {
 public:
  using Work::Work;
  int source() const { return source_.load(std::memory_order_acquire); }
  uint64_t bytes() const { return bytes_.load(std::memory_order_acquire); }
  // Before it finishes: the matched message's sender (a group rank) and size.
  void setReceived(int source, uint64_t bytes) {
    bytes_.store(bytes, std::memory_order_release);
    source_.store(source, std::memory_order_release);
  }

 private:
  std::atomic<int> source_{-1};
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace pycollect
