// HMAC-SHA256 (RFC 2104 / FIPS 198-1) over the hasher in sha256.h, a constant-time
// comparison for checking one, and fresh random bytes from the kernel: what the
// handshake's challenge-response (transport/tcp/handshake.h) is made of.
#pragma once

#include <cstddef>
#include <string>

#include "common/sha256.h"

namespace pycollect {

Sha256::Digest hmacSha256(const std::string& key, const void* message, size_t n);

// True if the n bytes at a and b are equal; takes the same time wherever they differ.
bool equalConstantTime(const void* a, const void* b, size_t n);

// Fills buf with n bytes from getrandom(2) (the kernel's CSPRNG, /dev/urandom's
// source); throws Error naming the syscall if it cannot.
void randomBytes(void* buf, size_t n);

}  // namespace pycollect
