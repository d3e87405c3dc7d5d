// One accepted connection going through the accepting side of the handshake
// (handshake.h), one non-blocking step at a time, so that the listener can hold
// many at once and a silent stranger delays nobody: it reads the peer's Hello
// (and nonce), answers with ours (and our nonce and proof) and, with a secret,
// reads the peer's proof. A connection that does not finish a stage within the
// grace period is refused as silent.
//
// Whether a greeting from a rank is taken is the caller's to say (Admit, asked once
// the Hello is complete): take it, or stand it down because this rank's own dial to it
// is the link (handshake.h).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "common/clock.h"
#include "transport/tcp/address.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/link.h"
#include "transport/tcp/mesh.h"
#include "transport/tcp/socket.h"

namespace pycollect {
namespace tcp {

enum class Admission { kTake, kStandDown };
// Whether the connection from `peer` for `channel` (transport.h) is taken.
using Admit = std::function<Admission(int peer, int channel)>;

class Incoming {
 public:
  enum class State { kWaiting, kAccepted, kRefused, kStoodDown };

  Incoming(Socket socket, Address from, Clock::duration grace);

  // Moves the handshake on with whatever has arrived; `admit` is asked once, when the
  // Hello is complete. After kRefused, verdict() says why.
  State step(const MeshOptions& opts, const Admit& admit, Clock::time_point now);

  // Still waiting for its Hello: the first to go when the listener is crowded.
  bool greeted() const { return stage_ != Stage::kHello; }
  int fd() const { return socket_.fd(); }
  const Address& from() const { return from_; }
  const Verdict& verdict() const { return verdict_; }
  // The rank it claims, and the channel it is for (valid once greeted()).
  int peer() const { return hello_.from; }
  int channel() const { return static_cast<int>(hello_.channel); }
  // Whether `admit` took it (a refusal after that, a wrong proof, must be undone).
  bool admitted() const { return admitted_; }
  Socket takeSocket() { return std::move(socket_); }

 private:
  enum class Stage { kHello, kProof };
  State refuse(Refusal why, std::string text);
  State answer(const MeshOptions& opts, const Admit& admit, Clock::time_point now);
  State checkProof(const MeshOptions& opts);

  Socket socket_;
  Address from_;
  Clock::duration grace_;
  Clock::time_point graceEnd_;
  Stage stage_ = Stage::kHello;
  bool admitted_ = false;
  uint8_t in_[sizeof(Hello) + kNonceBytes] = {};  // Hello and nonce, or proof
  size_t got_ = 0;
  Hello hello_;
  Nonce peerNonce_{}, myNonce_{};
  Verdict verdict_;
};

}  // namespace tcp
}  // namespace pycollect
