// SHA-256 (FIPS 180-4, section 6.2), written from the standard for the handshake's
// HMAC (hmac.h); checked against hashlib in tests/test_auth.py. Not a general
// crypto library: one streaming hasher, no other algorithms.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace pycollect {

class Sha256 {
 public:
  static constexpr size_t kDigestBytes = 32;
  static constexpr size_t kBlockBytes = 64;
  using Digest = std::array<uint8_t, kDigestBytes>;

  Sha256();
  void update(const void* data, size_t n);
  // Pads, returns the digest; the hasher must not be used afterwards.
  Digest finish();

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, kBlockBytes> buffer_{};
  size_t buffered_ = 0;
  uint64_t totalBytes_ = 0;
};

}  // namespace pycollect
