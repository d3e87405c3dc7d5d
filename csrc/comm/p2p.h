// Point-to-point transfers that complete in the background.
//
// A send or recv is posted on its link's FIFO queue (header, then payload) and
// the worker moves on to the next operation at once; the transport moves the bytes
// while later operations wait, or while the worker idles. So two ranks that each
// isend a large message and then irecv the other's do not deadlock, as they would
// if a send had to finish before the recv was posted.
//
// The receiver checks the header (kind, dtype, count, tag, message number) as
// soon as it arrives. The payload goes straight into the caller's buffer; on a
// mismatch the group fails with a MismatchError naming both calls, and the
// buffer's contents are undefined.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "collectives/context.h"
#include "comm/work.h"
#include "transport/link.h"

namespace pycollect {

struct PendingP2P {
  bool isSend = true;
  int peer = -1;
  int self = -1;
  void* data = nullptr;
  size_t bytes = 0;
  WireHeader header;    // send: what we send (lives here until sent); recv: what we expect
  HeaderRecv received;  // recv: the header that arrived (maybe prefetched, see inbox.h)
  Link* link = nullptr;
  uint64_t payloadTicket = 0;
  bool headerChecked = false;
  std::shared_ptr<Work> work;
  Clock::time_point deadline;

  // Queue header and payload on the link; a recv takes a header the inbox already holds.
  void post(Link* l, HeaderInbox& inbox, Clock::time_point d);
  // True once done; throws MismatchError / TimeoutError.
  bool poll();
};

}  // namespace pycollect
