// The listening half of the mesh: a socket bound to a kernel-chosen port, on
// which every lower rank connects (acceptLower in mesh.h).
#pragma once

#include <string>

#include "transport/tcp/address.h"
#include "transport/tcp/socket.h"

namespace pycollect {
namespace tcp {

class Listener {
 public:
  // Binds `host` (numeric IPv4/IPv6 or a name) on a kernel-chosen port and listens.
  explicit Listener(const std::string& host);
  const Address& address() const { return address_; }
  Socket& socket() { return socket_; }
  void close() { socket_.close(); }

 private:
  Socket socket_;
  Address address_;
};

}  // namespace tcp
}  // namespace pycollect
