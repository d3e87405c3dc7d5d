// Headers received ahead of their reader.
//
// Every link is a FIFO byte stream, so the next header on a link belongs to the next
// operation that reads that link. A recv from any source cannot know which link its
// message comes on: it posts a header receive on every link (prefetch) and takes the
// first that turns out to be a matching send. The other prefetched headers stay here,
// and the next reader of that link (a collective's header exchange, a recv) takes its
// header from here instead of posting a receive of its own: the bytes keep their order.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/wire_header.h"
#include "transport/link.h"

namespace pycollect {

// One header being received: into `own`, or, when it was prefetched, into `early`.
struct HeaderRecv {
  uint64_t ticket = 0;
  WireHeader own;
  std::shared_ptr<WireHeader> early;
  const WireHeader& header() const { return early ? *early : own; }
};

class HeaderInbox {
 public:
  explicit HeaderInbox(int size) : slots_(size) {}
  // Starts receiving link l's next header into `r` (which must stay put until it
  // arrives), or hands `r` the one prefetched there.
  void receive(Link& l, HeaderRecv& r);
  // Posts a receive for link l's next header, unless one is waiting already.
  void prefetch(Link& l);
  // The header prefetched on l, once it arrived; nullptr otherwise.
  const WireHeader* arrived(Link& l) const;
  // Forget everything (the links were aborted).
  void clear();

 private:
  struct Slot {
    std::shared_ptr<WireHeader> header;
    uint64_t ticket = 0;
  };
  std::vector<Slot> slots_;  // indexed by peer
};

}  // namespace pycollect
