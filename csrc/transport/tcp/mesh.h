// Builds the full mesh of links for one group: every rank listens on a port the
// kernel picks, publishes it (the Python layer does that through the store), then
// connects to every higher rank and accepts every lower one, checking the Hello
// on both sides.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/link.h"
#include "transport/tcp/address.h"
#include "transport/tcp/socket.h"

namespace pycollect {
namespace tcp {

struct MeshOptions {
  int rank = 0;
  int size = 1;
  uint64_t token = 0;
  double timeoutSec = 300.0;
  int socketBuffer = 0;  // SO_SNDBUF/SO_RCVBUF, 0 for the kernel's autotuning
};

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

// Returns links indexed by peer rank (nullptr at `opts.rank`). `hosts[i]`/`ports[i]`
// is where rank i listens. Throws TimeoutError/PeerLostError naming the rank that
// could not be reached.
std::vector<std::unique_ptr<Link>> connectMesh(Listener& listener,
                                               const std::vector<std::string>& hosts,
                                               const std::vector<int>& ports,
                                               const MeshOptions& opts);

}  // namespace tcp
}  // namespace pycollect
