"""The handshake's HMAC-SHA256 against hashlib."""
import hashlib
import hmac
import os

import pytest

from pycollect import _C

# -- HMAC-SHA256 ----------------------------------------------------------------------


def test_hmac_sha256_rfc4231_case_2():
    digest = _C.hmac_sha256(b"Jefe", b"what do ya want for nothing?")
    assert digest.hex() == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"


@pytest.mark.parametrize("key_len", [0, 1, 32, 63, 64, 65, 131])
@pytest.mark.parametrize("msg_len", [0, 1, 55, 56, 63, 64, 65, 119, 120, 1000, 100_003])
def test_hmac_sha256_matches_hashlib(key_len, msg_len):
    # Message lengths around the padding boundaries (55/56 bytes mod 64) and keys
    # shorter than, equal to and longer than a block (hashed first).
    key, msg = os.urandom(key_len), os.urandom(msg_len)
    assert _C.hmac_sha256(key, msg) == hmac.new(key, msg, hashlib.sha256).digest()
