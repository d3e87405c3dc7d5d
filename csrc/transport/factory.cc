#include "common/error.h"
#include "transport/mesh/transport.h"
#include "transport/transport.h"

namespace pycollect {

// The only place that knows the implementations. Every kind gets the mesh: the choice
// of TCP or shared memory is made per link, with the peer's consent (mesh/upgrade.h),
// so `kind` is this rank's preference. A transport that carries a group's links by
// itself (its own folder, implementing transport.h) gets its kind and a case here.
std::unique_ptr<Transport> makeTransport(TransportKind kind, const TransportOptions& options) {
  switch (kind) {
    case TransportKind::kTcp:
    case TransportKind::kShm:
    case TransportKind::kAuto: return std::make_unique<mesh::Transport>(kind, options);
  }
  throw InvalidArgument("unknown transport kind " + std::to_string(static_cast<int>(kind)));
}

}  // namespace pycollect
