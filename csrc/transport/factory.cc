#include "common/error.h"
#include "transport/tcp/transport.h"
#include "transport/transport.h"

namespace pycollect {

std::unique_ptr<Transport> makeTransport(TransportKind kind, const TransportOptions& options) {
  switch (kind) {
    case TransportKind::kTcp: return std::make_unique<tcp::Transport>(options);
  }
  throw InvalidArgument("unknown transport kind " + std::to_string(static_cast<int>(kind)));
}

}  // namespace pycollect
