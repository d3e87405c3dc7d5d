// How a wait on a thread that also runs the host program (Python) notices Ctrl-C.
//
// A collective that runs on the caller's thread (comm/communicator.h, InlineScope)
// blocks that thread in C++, where the program's signal handlers cannot run. The
// bindings install a check for the thread while such a call runs; long waits call
// it every kCheckEvery, and stop with Interrupted when it says so.
#pragma once

#include <chrono>

namespace pycollect {
namespace interrupt {

using Check = bool (*)();  // true: the program wants this thread to stop waiting
constexpr std::chrono::milliseconds kCheckEvery{50};

// Installs `check` for the calling thread while the scope lives (nullptr: none).
class Scope {
 public:
  explicit Scope(Check check);
  ~Scope();

 private:
  Check saved_;
};

// Whether this thread has a check installed, and whether it asks to stop now.
bool installed();
bool requested();

}  // namespace interrupt
}  // namespace pycollect
