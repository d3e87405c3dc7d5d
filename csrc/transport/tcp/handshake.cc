#include "transport/tcp/handshake.h"

#include <cstring>

#include "common/hmac.h"
#include "transport/transport.h"

namespace pycollect {
namespace tcp {

Hello makeHello(uint64_t token, int from, int to, bool withSecret, int channel) {
  Hello h;
  h.token = token;
  h.from = from;
  h.to = to;
  h.flags = withSecret ? kFlagSecret : 0;
  h.channel = static_cast<uint32_t>(channel);
  return h;
}

const char* refusalName(Refusal r) {
  switch (r) {
    case Refusal::kNone: return "accepted";
    case Refusal::kSilent: return "silent";
    case Refusal::kClosed: return "closed early";
    case Refusal::kBadMagic: return "bad magic";
    case Refusal::kBadVersion: return "other version";
    case Refusal::kWrongToken: return "wrong token";
    case Refusal::kMisaddressed: return "misaddressed";
    case Refusal::kAuthFailed: return "authentication failed";
  }
  return "?";
}

Verdict checkHello(const Hello& h, uint64_t token, int self, int worldSize) {
  if (h.magic != kMagic) return {Refusal::kBadMagic, "bad magic (not a pycollect peer)"};
  if (h.version != kProtocolVersion) {
    return {Refusal::kBadVersion, "protocol version " + std::to_string(h.version) + ", expected " +
                                      std::to_string(kProtocolVersion)};
  }
  if (h.token != token) {
    return {Refusal::kWrongToken, "wrong job token (a peer of another job or group)"};
  }
  if (h.to != self) {
    return {Refusal::kMisaddressed, "greeting addressed to rank " + std::to_string(h.to) +
                                        ", this is rank " + std::to_string(self)};
  }
  if (h.from < 0 || h.from >= worldSize || h.from == self) {
    return {Refusal::kMisaddressed, "sender claims impossible rank " + std::to_string(h.from)};
  }
  if (h.channel >= static_cast<uint32_t>(kChannels)) {
    return {Refusal::kMisaddressed, "greeting names channel " + std::to_string(h.channel) + ", which does not exist"};
  }
  return {};
}

Proof proveSecret(const std::string& secret, Side prover, uint64_t token, int connecting,
                  int accepting, int channel, const Nonce& connectingNonce, const Nonce& acceptingNonce) {
  const char* label = prover == Side::kConnecting ? "pycollect v2 connecting side"
                                                  : "pycollect v2 accepting side ";
  uint8_t msg[28 + 8 + 4 + 4 + 4 + 2 * kNonceBytes];
  uint8_t* p = msg;
  auto put = [&p](const void* src, size_t n) {
    std::memcpy(p, src, n);
    p += n;
  };
  put(label, 28);
  put(&token, sizeof(token));
  int32_t c = connecting, a = accepting, ch = channel;
  put(&c, sizeof(c));
  put(&a, sizeof(a));
  put(&ch, sizeof(ch));
  put(connectingNonce.data(), kNonceBytes);
  put(acceptingNonce.data(), kNonceBytes);
  return hmacSha256(secret, msg, sizeof(msg));
}

std::string authFailedMessage(int self, int peer) {
  return "rank " + std::to_string(self) + ": authentication failed with rank " +
         std::to_string(peer) + ": secrets differ or only one side has PYCOLLECT_SECRET";
}

}  // namespace tcp
}  // namespace pycollect
