"""What all_reduce(compress=...) promises, in numbers (docs/compression.md): the bytes a
format puts on the wire and the error bound of the result. The benchmark checks results
against the bound, the cost model prices the bytes, the tests check both.

The bound, for a ring of k members (the group on one host; its hosts across hosts: the
hierarchical all-reduce compresses only between hosts), A[i] = the sum over ranks of |x[i]|
(divided by the group's size for AVG), at each position i:

    bf16: |result[i] - exact[i]| <= k * 2^-8 * A[i]
    int8: |result[i] - exact[i]| <= k * max(A over the 511 positions centred on i) / 254

plus float32's own rounding of the sums (n * 2^-24 * A[i] for n ranks), and for int8
k * 2^-143 (about 9e-44: a scale among the subnormals is rounded too). Each of the k
encodes a value meets (k - 1 partial sums on their way around the ring, then the owner's
once) errs by at most 2^-8 of the value (bf16, round to nearest-even) or half a step of its
block's scale max|x| / 127 (int8); every partial sum is at most A.
"""
from __future__ import annotations

import numpy as np

from . import _C
from .types import Compress

INT8_BLOCK = 256
# int8's scale max|x| / 127 is itself a float32: among the subnormals (a block's largest
# value under ~1e-36) it is rounded to a step of 2^-149, and q (up to 127) times that
# step's half-error adds at most 64 * 2^-149 a value.
SUBNORMAL_SLACK = 2.0 ** -143


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
        return k * 2.0 ** -8 * a + rounding
    pad = np.pad(a, INT8_BLOCK - 1, constant_values=0.0)
    window = np.lib.stride_tricks.sliding_window_view(pad, 2 * INT8_BLOCK - 1).max(axis=1)
    return k * (window / 254.0 + SUBNORMAL_SLACK) + rounding
