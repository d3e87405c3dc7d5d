#include "common/fork.h"

#include <pthread.h>
#include <unistd.h>

#include <mutex>
#include <set>
#include <string>

#include "common/error.h"

namespace pycollect {
namespace fork {
namespace {

std::mutex mu;                 // held across fork() (prepare -> parent/child) so the set is whole
std::set<int>* fds = nullptr;  // never freed: still valid in a child and at exit

void prepare() { mu.lock(); }
void parent() { mu.unlock(); }
void child() {
  // Only close(2) here, which is async-signal-safe; the set is emptied in place.
  for (int fd : *fds) ::close(fd);
  fds->clear();
  mu.unlock();  // fork() copied the lock held by the forking thread, which is this one
}

void installOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    fds = new std::set<int>();
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

Owner::Owner() : pid_(::getpid()) {}

bool Owner::here() const { return ::getpid() == pid_; }

void Owner::check(const char* what) const {
  if (here()) return;
  throw GroupFailedError("this process (pid " + std::to_string(::getpid()) + ") is a fork of pid " +
                         std::to_string(pid_) + ", which made " + what + "; a forked child cannot use its " +
                         "parent's groups (their sockets were closed in the child at fork): call " +
                         "init_process_group in the child instead");
}

}  // namespace fork
}  // namespace pycollect
