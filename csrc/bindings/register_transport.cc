// Bindings of the transport helpers the Python layer needs before a group exists:
// the address to publish for PYCOLLECT_SOCKET_IFNAME, the wire's ping-pong limit, and the
// host identity the shared-memory upgrade compares (a group's topology is made of it).
#include <pybind11/stl.h>

#include "bindings/register.h"
#include "transport/mesh/upgrade.h"
#include "transport/tcp/address.h"
#include "transport/tcp/probe.h"

namespace py = pybind11;

namespace pycollect {

void registerTransport(py::module_& m) {
  m.def(
      "interface_address",
      [](const std::string& name, int family) { return tcp::interfaceAddress(name, family); },
      py::arg("name"), py::arg("family") = 0);
  // Blocks while it measures: the GIL is released (it touches no Python object).
  m.def("tcp_round_trip_us", &tcp::pingPongRoundTripUs, py::arg("iters") = 2000, py::arg("busy_poll") = false,
        py::call_guard<py::gil_scoped_release>());
  // "<boot id>/<ipc namespace>/<tag>" ("" where unknown): ranks with equal ones share a host.
  m.def("host_identity", &mesh::hostIdentity, py::arg("tag") = "");
}

}  // namespace pycollect
