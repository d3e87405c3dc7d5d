#include "common/error.h"
#include "transport/shm/transport.h"
#include "transport/transport.h"

namespace pycollect {

// Every kind gets the same transport: the choice is made per link, with the
// peer's consent (shm/upgrade.h), so `kind` is this rank's preference.
std::unique_ptr<Transport> makeTransport(TransportKind kind, const TransportOptions& options) {
  switch (kind) {
    case TransportKind::kTcp:
    case TransportKind::kShm:
    case TransportKind::kAuto: return std::make_unique<shm::Transport>(kind, options);
  }
  throw InvalidArgument("unknown transport kind " + std::to_string(static_cast<int>(kind)));
}

}  // namespace pycollect
