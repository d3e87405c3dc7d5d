// A handle on one queued operation: wait for it, poll it, or collect its error.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "trace/flight.h"

namespace pycollect {

class Work {
 public:
  explicit Work(std::string what) : what_(std::move(what)) {}
  virtual ~Work() = default;

  // Blocks until the op finished or `timeoutSec` passed (< 0: no limit). Returns
  // false on timeout; rethrows the op's error if it failed.
  bool wait(double timeoutSec);
  bool isCompleted();
  bool failed();
  const std::string& what() const { return what_; }

  // The first call decides the outcome; later ones (a second error) are ignored.
  void finish(std::exception_ptr error);
  // Runs `fn` once the op finished (its outcome then settled: wait() returns or throws at
  // once): on this thread now if it already has, else on the thread that finishes it,
  // after finished(). That thread may be the one driving the group's links; `fn` may issue
  // further calls on the group (Communicator::enqueue runs them there, in order: see
  // worker.cc, [Note: calls from a completion]), but must not wait for another thread.
  void whenDone(std::function<void()> fn);
  // Its entry in the group's flight recorder (trace/flight.h): finish() ends it.
  void setFlight(flight::Mark mark) { flight_ = mark; }
  const flight::Mark& flight() const { return flight_; }

 protected:
  // Runs once, on the thread that finished the op, after waiters were woken.
  virtual void finished(bool /*failed*/) {}

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::vector<std::function<void()>> whenDone_;  // (under mu_) run by finish()
  flight::Mark flight_;
};

}  // namespace pycollect
