// The Transport every group gets (transport/factory.cc): a TCP mesh first, then,
// per link, shared memory where both ranks are on the same host (upgrade.h), so
// one group may mix both kinds. TCP links are driven by the TCP transport inside;
// the shared-memory links here.
//
// Waiting (waitReady): with shared-memory work queued, watch the peers' cursors for
// up to kSpin, yielding the core between looks (a ring round trip is far shorter
// than a poll wake-up through the doorbell), then raise the sleeping flags and block
// in one poll on the TCP sockets with work, the doorbell sockets of the busy
// shared-memory links (the peers' deaths), this rank's Bell (the peers' rings,
// shm/bell.h) and the wake-up eventfd. Spinning first cuts a small call's
// wait several times over (docs/measurements.md, "spinning before sleeping").
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "transport/shm/bell.h"
#include "transport/shm/link.h"
#include "transport/tcp/transport.h"
#include "transport/transport.h"

namespace pycollect {
namespace mesh {

constexpr auto kSpin = std::chrono::microseconds(200);

class Transport final : public pycollect::Transport {
 public:
  Transport(TransportKind mode, const TransportOptions& options)
      : mode_(mode), options_(options), tcp_(options) {}

  Endpoint listen(const std::string& host) override { return tcp_.listen(host); }
  std::vector<pycollect::Link*> connect(const std::vector<Endpoint>& peers, uint64_t token) override;
  void cancelConnect() override { tcp_.cancelConnect(); }
  void progress() override;
  bool busy() const override;
  void waitReady(Clock::time_point until) override;
  const char* linkKind(int peer) const override;
  void wake() override;
  void close() override;

 private:
  // True once a busy shared-memory link can move, wake() was called, or `until`
  // passed, within kSpin.
  bool spin(Clock::time_point until);

  TransportKind mode_;
  TransportOptions options_;
  tcp::Transport tcp_;
  std::unique_ptr<shm::Bell> bell_;               // this rank's wake-up, lent to its shm peers
  std::vector<std::unique_ptr<shm::Link>> shm_;  // the upgraded links
  std::vector<bool> isShm_;                 // indexed by rank
  std::vector<shm::Link*> armed_;           // reused by waitReady
  std::vector<int> fds_;                    // reused by waitReady
  std::atomic<bool> woken_{false};
};

}  // namespace mesh
}  // namespace pycollect
