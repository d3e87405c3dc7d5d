#include "common/fork.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <set>
#include <string>

#include "common/error.h"

namespace pycollect {
namespace fork {
namespace {

std::mutex mu;                 // held across fork() (prepare -> parent/child) so the set is whole
std::set<int>* fds = nullptr;  // never freed: still valid in a child and at exit
// This process's pid, kept here so that Owner::here costs a load, not a getpid(2) system
// call on every collective: set when the handlers are installed, renewed in a child.
std::atomic<pid_t> self{0};

void prepare() { mu.lock(); }
void parent() { mu.unlock(); }
void child() {
  // Only close(2) and getpid(2) here, which are async-signal-safe; the set is emptied in place.
  self.store(::getpid(), std::memory_order_relaxed);
  for (int fd : *fds) ::close(fd);
  fds->clear();
  mu.unlock();  // fork() copied the lock held by the forking thread, which is this one
}

void installOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    fds = new std::set<int>();
    self.store(::getpid(), std::memory_order_relaxed);
    ::pthread_atfork(prepare, parent, child);
  });
}

}  // namespace

void track(int fd) {
  installOnce();
  std::lock_guard<std::mutex> lock(mu);
  fds->insert(fd);
}

void untrack(int fd) {
  installOnce();
  std::lock_guard<std::mutex> lock(mu);
  fds->erase(fd);
}

Owner::Owner() {
  installOnce();  // from now on a fork renews `self`
  pid_ = self.load(std::memory_order_relaxed);
}

bool Owner::here() const { return self.load(std::memory_order_relaxed) == pid_; }

void Owner::check(const char* what) const {
  if (here()) return;
  throw GroupFailedError("this process (pid " + std::to_string(::getpid()) + ") is a fork of pid " +
                         std::to_string(pid_) + ", which made " + what + "; a forked child cannot use its " +
                         "parent's groups (their sockets were closed in the child at fork): call " +
                         "init_process_group in the child instead");
}

}  // namespace fork
}  // namespace pycollect
