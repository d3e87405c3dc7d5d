#include "comm/work.h"

#include <chrono>
#include <string>

namespace pycollect {

bool Work::wait(double timeoutSec) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeoutSec < 0) {
    cv_.wait(lock, [this] { return done(); });
  } else if (!cv_.wait_for(lock, std::chrono::duration<double>(timeoutSec), [this] { return done(); })) {
    return false;
  }
  if (!whenDone_.empty()) {  // finished with its hooks deferred: the waiter runs them
    lock.unlock();
    runHooks();
    lock.lock();
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

const std::string& Work::what() const {
  std::call_once(describe_, [this] {
    if (!described_) what_ = "rank " + std::to_string(rank_) + " " + describeCall(call_);
  });
  return what_;
}

bool Work::isCompleted() { return done(); }

bool Work::failed() { return outcome_.load(std::memory_order_acquire) == 2; }

void Work::whenDone(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done()) {
      whenDone_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

std::vector<std::function<void()>> Work::complete(std::exception_ptr error, bool deferHooks) {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done()) return hooks;  // finished once, with its first outcome
    error_ = error;
    outcome_.store(error != nullptr ? 2 : 1, std::memory_order_release);
    if (!deferHooks) hooks.swap(whenDone_);
  }
  flight_.ended(error != nullptr);
  cv_.notify_all();
  finished(error != nullptr);
  return hooks;
}

void Work::finish(std::exception_ptr error) {
  for (auto& fn : complete(error, false)) fn();
}

void Work::finishDeferred(std::exception_ptr error) { complete(error, true); }

void Work::runHooks() {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done()) return;  // not finished: finish() will run them
    hooks.swap(whenDone_);
  }
  for (auto& fn : hooks) fn();
}

}  // namespace pycollect
