"""What all_reduce(compress=...) promises, in numbers (docs/compression.md): the bytes a
format puts on the wire and the error bound of the result. The benchmark checks results
against the bound, the cost model prices the bytes, the tests check both.

The bound, for a ring of k members (the group on one host; its hosts across hosts: the
hierarchical all-reduce compresses only between hosts), A[i] = the sum over ranks of |x[i]|
(divided by the group's size for AVG), at each position i:

    bf16: |result[i] - exact[i]| <= k * 2^-8 * A[i]
    int8: |result[i] - exact[i]| <= k * max(A over the 511 positions centred on i) / 254

plus float32's own rounding of the sums (n * 2^-24 * A[i] for n ranks), and k * 2^-134
(about 4.6e-41: among the subnormals precision is absolute, SUBNORMAL_SLACK). Each of the k
encodes a value meets (k - 1 partial sums on their way around the ring, then the owner's
once) errs by at most 2^-8 of the value (bf16, round to nearest-even) or half a step of its
block's scale max|x| / 127 (int8); every partial sum is at most A.
"""
from __future__ import annotations

import numpy as np

from . import _C
from .types import Compress

INT8_BLOCK = 256
# Among float32's subnormals (below ~1.2e-38) precision is absolute, not relative: bf16 keeps
# 7 bits of a subnormal's mantissa, so it rounds to a step of 2^-133 (half of it: 2^-134);
# int8's scale max|x| / 127 rounds to a step of 2^-149 and q (up to 127) times its half-error
# adds at most 64 * 2^-149. One slack covers both: k * 2^-134 (about 4.6e-41).
SUBNORMAL_SLACK = 2.0 ** -134


def wire_bytes(compress, count: int) -> int:
    """Bytes `count` float32 values take on the wire in `compress` (as the engine counts)."""
    return int(_C.wire_bytes(count, int(Compress.parse(compress, "compress"))))


def error_bound(abs_sum: np.ndarray, compress, k: int, ranks: int = 1) -> np.ndarray:
    """The bound per position (this module's docstring), from A = `abs_sum`, for a ring of
    `k` members and a group of `ranks`."""
    fmt = Compress.parse(compress, "compress")
    a = np.asarray(abs_sum, dtype=np.float64)
    rounding = 2.0 ** -24 * max(ranks, 1) * a
    if fmt == Compress.NONE or a.size == 0:
        return rounding
    if fmt == Compress.BF16:
        return k * (2.0 ** -8 * a + SUBNORMAL_SLACK) + rounding
    pad = np.pad(a, INT8_BLOCK - 1, constant_values=0.0)
    window = np.lib.stride_tricks.sliding_window_view(pad, 2 * INT8_BLOCK - 1).max(axis=1)
    return k * (window / 254.0 + SUBNORMAL_SLACK) + rounding
