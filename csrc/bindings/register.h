#pragma once

#include <pybind11/pybind11.h>

namespace pycollect {
void registerErrors(pybind11::module_& m);
void registerCommunicator(pybind11::module_& m);
void registerTransport(pybind11::module_& m);
}  // namespace pycollect
