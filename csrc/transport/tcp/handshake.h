// The connection handshake. The connecting rank sends a Hello; the accepting rank
// checks every field and answers with its own Hello. A connection whose Hello is
// wrong (a stranger, another job, a stale process) is refused and logged, and the
// accepting rank goes on waiting for its real peers.
#pragma once

#include <cstdint>
#include <string>

namespace pycollect {
namespace tcp {

constexpr uint32_t kMagic = 0x4c4f4350;  // "PCOL" in little-endian byte order
constexpr uint32_t kProtocolVersion = 1;

struct Hello {
  uint32_t magic = kMagic;
  uint32_t version = kProtocolVersion;
  uint64_t token = 0;  // per-job random token from the rendezvous store
  int32_t from = -1;   // sender's rank
  int32_t to = -1;     // rank the sender believes it is talking to
};
static_assert(sizeof(Hello) == 24, "Hello is a fixed 24-byte wire record");

// Returns "" if `h` is a valid greeting to `self` for this job, else the reason.
std::string checkHello(const Hello& h, uint64_t token, int self, int worldSize);

}  // namespace tcp
}  // namespace pycollect
