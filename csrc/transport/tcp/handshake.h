// The connection handshake, protocol version 5.
//
//   connecting rank C                          accepting rank A
//   Hello{token, C, A, flags, ch} [+ nonce_C]  ->
//                                          <-  Hello{token, A, C, flags, ch} [+ nonce_A + proof_A]
//   [proof_C]                              ->
//
// A pair of ranks may hold one connection per channel (transport.h: the collectives' and
// the point-to-point messages'), each made and greeted on its own; the Hello names it.
//
// Links are made when first used (mesh/maker.h), by whichever end needs one first, so two
// ranks may dial each other at once. Then the lower rank's connection is the link: the
// lower rank answers the higher one's Hello with kFlagStandDown (and nothing more), and
// the higher rank drops that connection and takes the one it accepts.
//
// Every field of a Hello is checked. With a shared secret (PYCOLLECT_SECRET) both
// Hellos carry kFlagSecret and each side proves it knows the secret: a proof is
// HMAC-SHA256(secret, side label, token, C, A, channel, nonce_C, nonce_A), so it is
// fresh (both nonces), bound to this pair of ranks, channel and job, and useless as the other
// side's answer (the label). Without a secret the bracketed parts are absent.
// The token only stops accidents (anyone who can read the store has it); the
// secret never leaves the ranks (docs/security.md).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/sha256.h"

namespace pycollect {
namespace tcp {

constexpr uint32_t kMagic = 0x4c4f4350;  // "PCOL" in little-endian byte order
constexpr uint32_t kProtocolVersion = 5;  // 2: flags and the secret's challenge-response; 3: the
                                         // upgrade's Intro carries the Bell (mesh/upgrade.cc);
                                         // 4: links made on first use, kFlagStandDown;
                                         // 5: a connection per channel
constexpr uint32_t kFlagSecret = 1;       // the sender has a secret and will prove it
constexpr uint32_t kFlagStandDown = 2;    // answer only: drop this connection, my own dial is the link

struct Hello {
  uint32_t magic = kMagic;
  uint32_t version = kProtocolVersion;
  uint64_t token = 0;  // per-job random token from the rendezvous store
  int32_t from = -1;   // sender's rank
  int32_t to = -1;     // rank the sender believes it is talking to
  uint32_t flags = 0;  // kFlagSecret
  uint32_t channel = 0;  // which of the pair's connections this is (Channel, transport.h)
};
static_assert(sizeof(Hello) == 32, "Hello is a fixed 32-byte wire record");

constexpr size_t kNonceBytes = 32;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = Sha256::Digest;

Hello makeHello(uint64_t token, int from, int to, bool withSecret, int channel);

// Why a connection was refused, by kind: the listener counts them (refusals.h).
enum class Refusal : uint8_t {
  kNone,
  kSilent,        // no complete greeting within the grace period
  kClosed,        // closed or reset before greeting
  kBadMagic,      // not a pycollect peer
  kBadVersion,    // another protocol version
  kWrongToken,    // another job or group
  kMisaddressed,  // wrong ranks, wrong direction, no such channel, or a rank already connected
  kAuthFailed,    // the right job, but not the same secret
};
const char* refusalName(Refusal r);

struct Verdict {
  Refusal refusal = Refusal::kNone;
  std::string why;
  bool ok() const { return refusal == Refusal::kNone; }
};

// Whether `h` is a valid greeting to `self` for this job (secrets are checked later).
Verdict checkHello(const Hello& h, uint64_t token, int self, int worldSize);

enum class Side : uint8_t { kConnecting, kAccepting };
Proof proveSecret(const std::string& secret, Side prover, uint64_t token, int connecting,
                  int accepting, int channel, const Nonce& connectingNonce, const Nonce& acceptingNonce);

// "rank S: authentication failed with rank P: secrets differ or only one side has
// PYCOLLECT_SECRET", the error both ends of a failed proof end up raising.
std::string authFailedMessage(int self, int peer);

}  // namespace tcp
}  // namespace pycollect
