// The 32-byte record that starts every collective on every link, and every
// point-to-point message (see context.h for how it is exchanged and checked).
#pragma once

#include <cstdint>
#include <string>

namespace pycollect {

struct WireHeader {
  uint32_t magic = 0x5244'4850;  // "PHDR"
  uint8_t kind = 0;
  uint8_t dtype = 0;
  uint8_t redop = 0;
  uint8_t algo = 0;  // the Algo that runs: ranks that chose differently mismatch
  uint64_t seq = 0;
  uint64_t count = 0;
  int32_t root = -1;  // root (broadcast, reduce, gather, scatter), a send/recv's tag, the
                      // number of tensors of a coalesced call, or an all-reduce's wire
                      // format (Compress; -1 none)
  int32_t rank = -1;  // sender's rank
};
static_assert(sizeof(WireHeader) == 32, "WireHeader is a fixed 32-byte record");

// Renders a header as the call that produced it, e.g. "all_reduce(count=100, float32, SUM)".
std::string describeCall(const WireHeader& h);

// Whether `theirs` is the call `want`: kind, dtype, op, sequence number, count, root and
// algorithm alike.
bool sameCall(const WireHeader& want, const WireHeader& theirs);
// Throws MismatchError naming both calls unless `theirs` (from rank `peer`) is the call
// `want` (this rank's, `rank` in its group): kind, dtype, op, sequence number, count, root
// and algorithm alike.
void checkSameCall(const WireHeader& want, const WireHeader& theirs, int rank);
// The same for a record that came from rank `peer` where its header belongs (a link, an
// arena slot): first, that it is a header at all (else the peer is out of step).
void checkPeerHeader(const WireHeader& want, const WireHeader& theirs, int rank, int peer);

}  // namespace pycollect
