// Socket addresses: parse "host" + port (IPv4, IPv6, or a name), print them,
// and find the address of a named interface (PYCOLLECT_SOCKET_IFNAME).
#pragma once

#include <sys/socket.h>

#include <string>

namespace pycollect {
namespace tcp {

struct Address {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const { return storage.ss_family; }
  int port() const;
  std::string host() const;  // numeric, without brackets
  std::string str() const;   // "1.2.3.4:5" or "[::1]:5"

  // Resolves host (numeric or a name) and port; throws InvalidArgument if it cannot.
  static Address resolve(const std::string& host, int port);
  static Address fromSockaddr(const sockaddr* sa, socklen_t len);
};

// The first address of interface `ifname`, preferring `family` (AF_INET, AF_INET6,
// or AF_UNSPEC for either). Throws InvalidArgument naming the interfaces that exist.
std::string interfaceAddress(const std::string& ifname, int family);

}  // namespace tcp
}  // namespace pycollect
