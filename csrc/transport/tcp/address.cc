#include "transport/tcp/address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>
#include <set>

#include "common/error.h"

namespace pycollect {
namespace tcp {

int Address::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  }
  return -1;
}

std::string Address::host() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (family() == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, buf,
                sizeof(buf));
  } else if (family() == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, buf,
                sizeof(buf));
  }
  return buf;
}

std::string Address::str() const {
  if (family() == AF_INET6) return "[" + host() + "]:" + std::to_string(port());
  return host() + ":" + std::to_string(port());
}

Address Address::resolve(const std::string& host, int port) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  struct addrinfo hints {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(h.empty() ? nullptr : h.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw InvalidArgument("cannot resolve address '" + host + "': " + ::gai_strerror(rc));
  }
  Address a = fromSockaddr(res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  return a;
}

Address Address::fromSockaddr(const sockaddr* sa, socklen_t len) {
  Address a;
  std::memcpy(&a.storage, sa, len);
  a.length = len;
  return a;
}

std::string interfaceAddress(const std::string& ifname, int family) {
  struct ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw Error(syscallMessage("getifaddrs", errno, ""));
  std::string v4, v6;
  std::set<std::string> names;
  for (auto* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    int fam = it->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    names.insert(it->ifa_name);
    if (ifname != it->ifa_name) continue;
    socklen_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    Address a = Address::fromSockaddr(it->ifa_addr, len);
    if (fam == AF_INET && v4.empty()) v4 = a.host();
    if (fam == AF_INET6 && v6.empty()) {
      auto* s6 = reinterpret_cast<const sockaddr_in6*>(it->ifa_addr);
      if (!IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr) || it->ifa_flags & IFF_LOOPBACK) v6 = a.host();
    }
  }
  ::freeifaddrs(list);
  if (family == AF_INET6 && !v6.empty()) return v6;
  if (family == AF_INET && !v4.empty()) return v4;
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  std::string known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  throw InvalidArgument("PYCOLLECT_SOCKET_IFNAME: no interface named '" + ifname +
                        "' with an IP address (interfaces: " + known + ")");
}

}  // namespace tcp
}  // namespace pycollect
