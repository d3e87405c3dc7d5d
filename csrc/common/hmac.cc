#include "common/hmac.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>

#include "common/error.h"

namespace pycollect {

// HMAC(K, m) = H((K0 ^ opad) || H((K0 ^ ipad) || m)), where K0 is the key padded
// with zeros to one block, or its digest if it is longer than a block.
Sha256::Digest hmacSha256(const std::string& key, const void* message, size_t n) {
  uint8_t k0[Sha256::kBlockBytes] = {};
  if (key.size() > Sha256::kBlockBytes) {
    Sha256 h;
    h.update(key.data(), key.size());
    Sha256::Digest d = h.finish();
    std::copy(d.begin(), d.end(), k0);
  } else {
    std::copy(key.begin(), key.end(), k0);
  }
  uint8_t pad[Sha256::kBlockBytes];
  for (size_t i = 0; i < sizeof(pad); ++i) pad[i] = k0[i] ^ 0x36;
  Sha256 inner;
  inner.update(pad, sizeof(pad));
  inner.update(message, n);
  Sha256::Digest innerDigest = inner.finish();
  for (size_t i = 0; i < sizeof(pad); ++i) pad[i] = k0[i] ^ 0x5c;
  Sha256 outer;
  outer.update(pad, sizeof(pad));
  outer.update(innerDigest.data(), innerDigest.size());
  return outer.finish();
}

bool equalConstantTime(const void* a, const void* b, size_t n) {
  const volatile uint8_t* x = static_cast<const volatile uint8_t*>(a);
  const volatile uint8_t* y = static_cast<const volatile uint8_t*>(b);
  uint8_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff |= x[i] ^ y[i];
  return diff == 0;
}

void randomBytes(void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error(syscallMessage("getrandom", errno, "for a handshake nonce"));
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
}

}  // namespace pycollect
