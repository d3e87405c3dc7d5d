// Bindings of the transport helpers the Python layer needs before a group exists:
// the address to publish for PYCOLLECT_SOCKET_IFNAME.
#include <pybind11/stl.h>

#include "bindings/register.h"
#include "transport/tcp/address.h"

namespace py = pybind11;

namespace pycollect {

void registerTransport(py::module_& m) {
  m.def(
      "interface_address",
      [](const std::string& name, int family) { return tcp::interfaceAddress(name, family); },
      py::arg("name"), py::arg("family") = 0);
}

}  // namespace pycollect
