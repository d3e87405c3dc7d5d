// The TCP Transport: a full mesh of TCP links (mesh.h), driven by one Poller.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "transport/tcp/link.h"
#include "transport/tcp/listener.h"
#include "transport/tcp/mesh.h"
#include "transport/tcp/poller.h"
#include "transport/transport.h"

namespace pycollect {
namespace tcp {

class Transport final : public pycollect::Transport {
 public:
  explicit Transport(const TransportOptions& options) : options_(options) {}

  Endpoint listen(const std::string& host) override;
  std::vector<pycollect::Link*> connect(const std::vector<Endpoint>& peers,
                                        uint64_t token) override;
  void cancelConnect() override { cancel_ = true; }
  // progress() also checks every busy link's liveness (Link::checkAlive) once per
  // check period, and waitReady() wakes up for it.
  void progress() override;
  bool busy() const override;
  void waitReady(Clock::time_point until) override { waitReady(until, {}); }
  // Also returns when one of `readable` (descriptors of another transport) can be read.
  void waitReady(Clock::time_point until, const std::vector<int>& readable);
  const char* linkKind(int peer) const override { return "tcp"; }
  // Hands the link to `peer` over to another transport (mesh/transport.h), which
  // drives it from then on; this one forgets it. nullptr if there is none.
  std::unique_ptr<Link> detach(int peer);
  // The mesh's options for connecting with `token` (also the upgrade's exchange, which
  // runs on the mesh's links, mesh/upgrade.h): cancelConnect() stops both.
  MeshOptions meshOptions(uint64_t token) const;
  void wake() override { poller_.wake(); }
  void close() override;

 private:
  TransportOptions options_;
  std::unique_ptr<Listener> listener_;
  std::vector<std::unique_ptr<Link>> owned_;  // indexed by rank, nullptr at self
  std::vector<Link*> active_;                 // the non-null ones
  Poller poller_;
  std::atomic<bool> cancel_{false};
  Clock::duration checkPeriod_{};
  Clock::time_point nextCheck_{};
};

}  // namespace tcp
}  // namespace pycollect
