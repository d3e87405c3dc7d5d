// The Transport every group gets (transport/factory.cc). Its links are made when first
// used (maker.h), each a TCP connection that becomes shared memory where both ranks are
// on the same host (upgrade.h), so one group may mix both kinds. connect() makes only
// the ring's links (each rank's two neighbours: every group runs a ring, and a wrong
// secret or transport shows at formation), or all of them with PYCOLLECT_LINKS=all;
// the rest are made by the first call that posts on them (peer_link.h). Both channels'
// links (transport.h) are made so, each pair's independently. TCP links are driven by
// the TCP driver inside; the shared-memory links here.
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

#include "transport/mesh/maker.h"
#include "transport/peer_link.h"
#include "transport/shm/bell.h"
#include "transport/shm/link.h"
#include "transport/tcp/driver.h"
#include "transport/transport.h"

namespace pycollect {
namespace mesh {

constexpr auto kSpin = std::chrono::microseconds(200);

class Transport final : public pycollect::Transport {
 public:
  Transport(TransportKind mode, const TransportOptions& options);
  ~Transport() override { maker_.stop(); }

  Endpoint listen(const std::string& host) override { return maker_.listen(host); }
  std::vector<pycollect::Link*> connect(const std::vector<Endpoint>& peers, uint64_t token) override;
  std::vector<pycollect::Link*> links(Channel channel) override;
  void cancelConnect() override { maker_.stop(); }
  void progress() override;
  bool busy() const override;
  void waitReady(Clock::time_point until) override;
  void checkPeers() override;
  const char* linkKind(int peer) const override;
  void wake() override;
  void close() override;

 private:
  // The links made since the last look, each attached to its PeerLink.
  void adoptMade();
  // Has the links that posts wait for made: dials, or rethrows why one failed.
  void makeWanted();
  // True once a busy shared-memory link can move, wake() was called, or `until`
  // passed, within kSpin.
  bool spin(Clock::time_point until);

  TransportOptions options_;
  LinkMaker maker_;
  tcp::Driver tcp_;
  // Indexed by channel * size + rank (a PeerLink's slot), nullptr at self.
  std::vector<std::unique_ptr<PeerLink>> links_;
  std::vector<int> wanted_;                       // slots whose posts wait for a link (peer_link.h)
  std::vector<std::unique_ptr<shm::Link>> shm_;   // the made shared-memory links
  std::unique_ptr<std::atomic<const char*>[]> kinds_;  // by rank: nullptr until made (any thread reads)
  std::vector<shm::Link*> armed_;                 // reused by waitReady
  std::vector<int> fds_;                          // reused by waitReady
  std::atomic<bool> woken_{false};
};

}  // namespace mesh
}  // namespace pycollect
