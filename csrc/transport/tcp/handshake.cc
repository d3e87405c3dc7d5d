#include "transport/tcp/handshake.h"

namespace pycollect {
namespace tcp {

std::string checkHello(const Hello& h, uint64_t token, int self, int worldSize) {
  if (h.magic != kMagic) return "bad magic (not a pycollect peer)";
  if (h.version != kProtocolVersion) {
    return "protocol version " + std::to_string(h.version) + ", expected " +
           std::to_string(kProtocolVersion);
  }
  if (h.token != token) return "wrong job token (a peer of another job or group)";
  if (h.to != self) {
    return "greeting addressed to rank " + std::to_string(h.to) + ", this is rank " +
           std::to_string(self);
  }
  if (h.from < 0 || h.from >= worldSize || h.from == self) {
    return "sender claims impossible rank " + std::to_string(h.from);
  }
  return "";
}

}  // namespace tcp
}  // namespace pycollect
