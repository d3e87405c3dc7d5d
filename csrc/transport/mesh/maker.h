// Makes a group's links when they are first needed, so that a rank pays for the peers
// it talks to rather than for the group's size: a ring needs two neighbours, a
// hierarchy its host and its rail; only all-to-all and the direct algorithms need
// everyone (docs/formation.md).
//
// A pair of ranks has one link per channel (transport.h), each made on its own, as below.
// A link is made by whichever end needs it first: that rank dials (tcp/connector.cc),
// on the thread that drives its group, and the peer's acceptor thread, which greets
// every connection for as long as the group lives, answers (tcp/listener.h). Both ends
// then choose TCP or shared memory on the new connection (upgrade.h). The dialer blocks
// for that (milliseconds: the other end is a thread that does nothing else), and never
// waits on the peer's driver, so a rank busy with other calls cannot hold it up. When
// both ends dial at once, the lower rank's connection is the link: the lower rank
// stands the other down (tcp/handshake.h), and the higher one takes the link through
// its acceptor. Each peer's state says who is making its link:
//
//   none -> dialing -> made             this rank dialed
//   none -> accepting -> made           the peer dialed
//   dialing -> awaiting -> accepting    stood down: the lower rank's dial is coming
//   any -> failed                       the dial or the upgrade failed (the error is kept)
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "common/fork.h"
#include "transport/mesh/upgrade.h"
#include "transport/shm/bell.h"
#include "transport/shm/link.h"
#include "transport/tcp/link.h"
#include "transport/tcp/listener.h"
#include "transport/transport.h"

namespace pycollect {
namespace mesh {

// One made link: TCP, or shared memory (with its TCP connection inside as the doorbell).
struct Made {
  int peer = -1;
  Channel channel = Channel::kCollectives;
  std::unique_ptr<tcp::Link> tcp;
  std::unique_ptr<shm::Link> shm;
};

class LinkMaker {
 public:
  LinkMaker(TransportKind mode, const TransportOptions& options);
  ~LinkMaker() { stop(); }
  LinkMaker(const LinkMaker&) = delete;
  LinkMaker& operator=(const LinkMaker&) = delete;

  Endpoint listen(const std::string& host);
  // Starts greeting the peers that dial this rank (the acceptor thread). `wake` is called,
  // from any thread, whenever a link was made or failed.
  void start(const std::vector<Endpoint>& peers, uint64_t token, std::function<void()> wake);

  // Any thread but the acceptor's: dials `peer` for `channel` unless that link is made or
  // being made, and waits for the handshake and the upgrade. Returns at once otherwise.
  void dial(int peer, Channel channel, Clock::time_point deadline);
  // Whether that link is being made by the peer (this rank waits for it), and a dial
  // that was stood down waited long enough for the peer's to come (then dial again).
  bool shouldDial(int peer, Channel channel);
  // The links made since the last call.
  std::vector<Made> takeMade();
  bool anyMade() const { return anyMade_.load(std::memory_order_acquire); }
  // Rethrows why that link could not be made, if it could not.
  void rethrowFailure(int peer, Channel channel) const;

  // Blocks until the collectives' links to all of `peers` are made (taken or not), one failed
  // (rethrown), cancel() was called or `deadline` passed (TimeoutError naming the ranks
  // missing, or the failed authentication that explains them).
  void awaitMade(const std::vector<int>& peers, Clock::time_point deadline);

  // Any thread, more than once: makes dials and awaitMade give up soon, stops the
  // acceptor and closes the listener (peers that dial now are refused); links not yet
  // taken are closed.
  void stop();

  const tcp::MeshOptions& meshOptions() const { return mesh_; }
  // Whether stop() was called: no link is made from then on.
  bool stopped() const { return cancel_.load(); }
  // This rank's Bell (shm/bell.h), which its shared-memory peers ring: its descriptor to
  // poll, and emptying it once woken. Worker thread.
  int bell() const { return bell_ ? bell_->fd() : -1; }
  void drainBell() {
    if (bell_) bell_->drain();
  }

 private:
  enum class State { kNone, kDialing, kAwaiting, kAccepting, kMade, kFailed };

  void acceptLoop();
  void cancel();
  // The index of (peer, channel) in the per-link state below.
  int slot(int peer, Channel channel) const { return static_cast<int>(channel) * options_.size + peer; }
  bool dialable(int s) const;  // under mu_: state_[s] lets this rank dial
  tcp::Admission admit(int peer, int channel);
  void release(int peer, int channel);
  // Both ends: the upgrade on a new connection, then the link handed over (or the failure kept).
  void finish(std::unique_ptr<tcp::Link> link, Clock::time_point deadline);
  void fail(int s, StoredError error);
  Clock::time_point linkDeadline() const;

  TransportKind mode_;
  TransportOptions options_;
  fork::Owner owner_;
  std::unique_ptr<tcp::Listener> listener_;
  std::unique_ptr<shm::Bell> bell_;  // this rank's wake-up, lent to its shared-memory peers
  Local local_;
  std::vector<Endpoint> peers_;
  tcp::MeshOptions mesh_;
  std::atomic<bool> cancel_{false};
  std::function<void()> wake_;
  int wakeFd_ = -1;  // stops the acceptor's poll
  std::thread acceptor_;
  std::mutex stopMu_;  // stop() runs once at a time (the worker's close, another thread's abort)

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<State> state_;  // by slot()
  std::vector<Clock::time_point> awaitUntil_;
  std::vector<StoredError> errors_;  // thrown anew by each thread that asks (error.h)
  std::set<int> authFailed_;  // peers a connection claimed to be and failed the secret as
  std::vector<Made> made_;
  std::atomic<bool> anyMade_{false};
};

}  // namespace mesh
}  // namespace pycollect
