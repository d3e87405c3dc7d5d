#pragma once

#include <pybind11/pybind11.h>

#include <exception>

namespace pycollect {
// Runs Python's pending signal handlers (taking the GIL); true if one raised, whose
// exception is kept for the thread until an Interrupted error reaches Python.
bool pythonSignalPending();

// Sets the Python error for an engine error (PyCollectError and its kinds; the handler's
// own exception for Interrupted); rethrows any other exception. pybind11 calls it for the
// functions it binds.
void translateEngineError(std::exception_ptr p);
// The same for a function bound by hand (a CPython method, register_fast_calls.cc), with
// any other exception as RuntimeError (MemoryError for bad_alloc).
void setPythonError(std::exception_ptr p);

void registerErrors(pybind11::module_& m);
void registerCommunicator(pybind11::module_& m);
void registerTransport(pybind11::module_& m);
void registerLatency(pybind11::module_& m);
void registerBuffers(pybind11::module_& m);
void registerFastCalls(pybind11::module_& m);
void registerFastEntry(pybind11::module_& m);
void registerIssueLock(pybind11::module_& m);
}  // namespace pycollect
