#pragma once

#include <pybind11/pybind11.h>

namespace pycollect {
// Runs Python's pending signal handlers (taking the GIL); true if one raised, whose
// exception is kept for the thread until an Interrupted error reaches Python.
bool pythonSignalPending();

void registerErrors(pybind11::module_& m);
void registerCommunicator(pybind11::module_& m);
void registerTransport(pybind11::module_& m);
void registerLatency(pybind11::module_& m);
void registerBuffers(pybind11::module_& m);
void registerFastCalls(pybind11::module_& m);
}  // namespace pycollect
