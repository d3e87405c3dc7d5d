// What a forked child inherits from the engine, and what it must not do with it.
//
// fork() copies every descriptor but no thread. A child (a DataLoader worker, a
// subprocess helper) that kept the parent's sockets open would hold the parent's
// connections alive after the parent died, so its peers would wait for a FIN that
// never comes; a child that shut them down (the old atexit path) killed the
// parent's group. So: every descriptor the engine owns is tracked here, and a
// pthread_atfork child handler closes all of them in the child at once. Owners
// remember the pid that created them (Owner); in another process they neither
// close nor shut down their descriptor again (its number may be reused there),
// and communicators refuse every call with a sentence that says why.
#pragma once

#include <sys/types.h>

namespace pycollect {
namespace fork {

// Registers / forgets a descriptor the engine owns; tracked ones are closed in a forked child.
void track(int fd);
void untrack(int fd);

// The process that created something, to tell a forked child apart.
class Owner {
 public:
  Owner();
  // False in a process forked from the creator: leave the inherited state alone.
  bool here() const;
  // Raises GroupFailedError in a forked child, saying that `what` (what it owns, e.g.
  // "this process group") belongs to the parent and cannot be used here.
  void check(const char* what) const;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

}  // namespace fork
}  // namespace pycollect
