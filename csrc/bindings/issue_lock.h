#pragma once
// pycollect._C.IssueLock: a group's lock on issuing calls (ProcessGroup._lock), held while a
// call is issued and the group's list of calls in flight changes, so that calls keep one
// order across threads. Python holds it with `with`, as a threading.Lock; the API's fast
// calls (fast_calls.h) take it in C++ without a call into Python, which threading.Lock's
// acquire costs (its arguments parsed, the clock read) on every small call.
//
// A thread that finds it held waits with the GIL released, so the holder can go on.
#include <Python.h>

namespace pycollect {

// Whether `obj` is an IssueLock.
bool isIssueLock(PyObject* obj);

// Holds an IssueLock for a scope of the calling thread, which holds the GIL throughout.
class IssueLockHeld {
 public:
  explicit IssueLockHeld(PyObject* lock);
  ~IssueLockHeld();
  IssueLockHeld(const IssueLockHeld&) = delete;
  IssueLockHeld& operator=(const IssueLockHeld&) = delete;

 private:
  PyObject* lock_;
};

}  // namespace pycollect
