#include "transport/tcp/incoming.h"

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/hmac.h"

namespace pycollect {
namespace tcp {

Incoming::Incoming(Socket socket, Address from, Clock::duration grace)
    : socket_(std::move(socket)), from_(from), grace_(grace), graceEnd_(Clock::now() + grace) {}

Incoming::State Incoming::refuse(Refusal why, std::string text) {
  verdict_ = {why, std::move(text)};
  return State::kRefused;
}

Incoming::State Incoming::step(const MeshOptions& opts, const Admit& admit, Clock::time_point now) {
  // Bytes this stage needs: a Hello (plus a nonce if it says it has a secret), or a proof.
  auto want = [this] {
    if (stage_ == Stage::kProof) return sizeof(Proof);
    bool nonce = got_ >= sizeof(Hello) && (hello_.flags & kFlagSecret) != 0;
    return sizeof(Hello) + (nonce ? kNonceBytes : 0);
  };
  while (got_ < want()) {
    IoResult r = socket_.recvSome(in_ + got_, want() - got_);
    bool proving = stage_ == Stage::kProof;
    if (r.eof || (r.err != 0 && r.err != EAGAIN)) {
      std::string what = r.eof ? "closed" : syscallMessage("recv", r.err, "");
      if (proving) return refuse(Refusal::kAuthFailed, "rank " + std::to_string(peer()) + " " + what +
                                                           " instead of proving the secret");
      return refuse(Refusal::kClosed, what + " before completing the greeting");
    }
    if (r.err == EAGAIN) {
      if (now < graceEnd_) return State::kWaiting;
      if (proving) return refuse(Refusal::kAuthFailed, "no proof of the secret in time");
      return refuse(Refusal::kSilent, "no complete greeting within the grace period");
    }
    size_t before = got_;
    got_ += r.bytes;
    if (stage_ == Stage::kHello && before < sizeof(Hello) && got_ >= sizeof(Hello)) {
      std::memcpy(&hello_, in_, sizeof(Hello));
      Verdict v = checkHello(hello_, opts.token, opts.rank, opts.size);
      if (!v.ok()) return refuse(v.refusal, v.why);
    }
  }
  return stage_ == Stage::kHello ? answer(opts, admit, now) : checkProof(opts);
}

// A complete Hello from a plausible rank: answer with ours, and with a secret on both
// sides our nonce and proof; the peer's proof comes next. Or, if this rank's own dial
// to it is the link, our Hello saying so (kFlagStandDown), and nothing more.
Incoming::State Incoming::answer(const MeshOptions& opts, const Admit& admit, Clock::time_point now) {
  const int peer = hello_.from;
  if (admit(peer, channel()) == Admission::kStandDown) {
    Hello mine = makeHello(opts.token, opts.rank, peer, false, channel());
    mine.flags = kFlagStandDown;
    (void)socket_.sendSome(&mine, sizeof(mine));  // if it is lost, the peer sees the close
    return State::kStoodDown;
  }
  admitted_ = true;
  const bool withSecret = !opts.secret.empty();
  const bool theirs = (hello_.flags & kFlagSecret) != 0;
  uint8_t out[sizeof(Hello) + kNonceBytes + sizeof(Proof)];
  Hello mine = makeHello(opts.token, opts.rank, peer, withSecret, channel());
  std::memcpy(out, &mine, sizeof(mine));
  size_t n = sizeof(mine);
  if (withSecret && theirs) {
    std::memcpy(peerNonce_.data(), in_ + sizeof(Hello), kNonceBytes);
    randomBytes(myNonce_.data(), kNonceBytes);
    Proof proof = proveSecret(opts.secret, Side::kAccepting, opts.token, peer, opts.rank, channel(),
                              peerNonce_, myNonce_);
    std::memcpy(out + n, myNonce_.data(), kNonceBytes);
    std::memcpy(out + n + kNonceBytes, proof.data(), proof.size());
    n += kNonceBytes + proof.size();
  }
  // A fresh socket's send buffer takes these few bytes at once.
  IoResult r = socket_.sendSome(out, n);
  if (r.err != 0) return refuse(Refusal::kClosed, "could not answer: " + syscallMessage("send", r.err, ""));
  if (static_cast<size_t>(r.bytes) != n) return refuse(Refusal::kClosed, "could not answer: short send");
  if (withSecret != theirs) {
    // Our Hello told the peer; both sides now fail with the same message.
    return refuse(Refusal::kAuthFailed, std::string("only one side has a secret (this rank has ") +
                                            (withSecret ? "one)" : "none)"));
  }
  if (!withSecret) return State::kAccepted;
  stage_ = Stage::kProof;
  got_ = 0;
  graceEnd_ = now + grace_;
  return State::kWaiting;
}

Incoming::State Incoming::checkProof(const MeshOptions& opts) {
  Proof expected = proveSecret(opts.secret, Side::kConnecting, opts.token, peer(), opts.rank, channel(),
                               peerNonce_, myNonce_);
  if (!equalConstantTime(expected.data(), in_, expected.size())) {
    return refuse(Refusal::kAuthFailed, "wrong proof of the secret");
  }
  return State::kAccepted;
}

}  // namespace tcp
}  // namespace pycollect
