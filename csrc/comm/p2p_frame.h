// The 64-byte record that starts everything on a point-to-point link (comm/p2p.h): a
// message (Eager, Ready, Data) or the receiver's answer to one (Go, Credit).
//
//   Eager{id, tag, bytes} [+ payload]   a message sent at once: its payload follows the
//                                       frame, or sits inside it (at most kInlineBytes)
//   Ready{id, tag, bytes}               a message whose payload waits for the receiver
//   Go{id, credit}                      receiver -> sender: message `id` is matched, send it
//   Data{id, bytes} + payload           sender -> receiver: the payload of Ready `id`
//   Credit{credit}                      receiver -> sender: eager bytes given back
//
// `id` is the sender's number of the message (per pair and direction, from 0), by which
// Go and Data name a message announced by Ready; the flight recorder shows it too.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pycollect {

enum class FrameKind : uint8_t { kEager = 1, kReady = 2, kGo = 3, kData = 4, kCredit = 5 };

constexpr size_t kInlineBytes = 32;  // an Eager message this small travels inside its frame

struct Frame {
  uint32_t magic = kMagic;
  uint8_t kind = 0;  // FrameKind
  uint8_t reserved[3] = {};
  int32_t tag = 0;     // Eager, Ready
  uint32_t pad = 0;
  uint64_t bytes = 0;  // Eager, Ready, Data: the message's payload; Go, Credit: credit given back
  uint64_t id = 0;     // Eager, Ready, Go, Data: the message's number
  char inlined[kInlineBytes] = {};  // an Eager message of at most kInlineBytes: its payload

  static constexpr uint32_t kMagic = 0x4753'4d50;  // "PMSG"
};
static_assert(sizeof(Frame) == 64, "Frame is a fixed 64-byte record");

}  // namespace pycollect
