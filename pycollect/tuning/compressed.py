"""What all_reduce(compress="bf16" | "int8") costs, and whether it pays (docs/compression.md).

The compressed ring (csrc/collectives/allreduce_compressed.cc) is the ring all-reduce with
fewer bytes on the wire and a codec at each end:

    wire   the ring's formula on WIRE_RATIO[format] x the bytes (bf16 1/2; int8 1/4 plus a
           4-byte scale per 256 values: 0.254)
    codec  per rank, over a ring of k on S bytes (chunks of S/k): k encodes and 2k-1 decodes
           of a chunk (k-1 partial sums encoded, k-1 decoded and added; the owner's one encode
           and decode; k-1 all-gather decodes), at CODEC_NS_PER_BYTE[format] (encode,
           decode) per float32 byte, stretched by the ranks that share the busiest core

and the two added (the engine overlaps a unit's encode with the one before it on the wire,
but on 2 cores with 4 ranks the codec steals the time the wire would have had; the sum
predicted the 2 x 2 namespace hosts within 15 %). Across hosts only the rails' ring is
compressed: two_level(..., compress=) (hierarchy.py) swaps its inter-host term for this one.

    compressed_ring(64 << 20, 4, params, "int8")              # seconds, one host
    pays("all_reduce", 64 << 20, (2, 2), params, "int8")      # (exact s, compressed s)
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

from .formulas import DEFAULT_SEGMENT_BYTES, FORMULAS
from .params import Params

FORMATS = ("bf16", "int8")
WIRE_RATIO = {"bf16": 0.5, "int8": (1 + 4 / 256) / 4}
# Encode and decode, ns per float32 byte, one core of the 2-core development machine
# (pycollect._C.wire_round_trip on 64 MiB, load ~3): the codec's speed where none is measured.
CODEC_NS_PER_BYTE = {"bf16": (0.17, 0.12), "int8": (0.22, 0.15)}
PAYS_MARGIN = 0.10  # worth the error only where predicted 10 % faster (as the hierarchy's margin)


def _check(compress: str) -> None:
    if compress not in FORMATS:
        raise ValueError(f"compress must be one of {', '.join(FORMATS)}, got {compress!r}")


def codec_time(nbytes: float, k: int, params: Params, compress: str) -> float:
    """Seconds of encoding and decoding one rank does in a compressed ring of `k` over
    `nbytes` float32 bytes (this module's docstring), on `params`' cores."""
    _check(compress)
    if k < 2:
        return 0.0
    enc, dec = CODEC_NS_PER_BYTE[compress]
    chunk = nbytes / k
    return params.busiest(range(k)) * chunk * (k * enc + (2 * k - 1) * dec) * 1e-9


def compressed_ring(nbytes: float, k: int, params: Params, compress: str,
                    segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> float:
    """Seconds for the compressed ring all-reduce of `nbytes` float32 bytes over `k` ranks
    on links of `params`."""
    _check(compress)
    if k < 2:
        return 0.0
    wire = FORMULAS["all_reduce"]["ring"](nbytes * WIRE_RATIO[compress], k, params, segment_bytes)
    return wire + codec_time(nbytes, k, params, compress)


def pays(op: str, nbytes: float, layout: Sequence[int], params: Params, compress: str,
         segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> Tuple[float, float]:
    """(exact seconds, compressed seconds) for `op` (all_reduce) on hosts of `layout` ranks:
    on one host the ring against the compressed ring, across hosts the hierarchy against
    the hierarchy with its inter-host level compressed. Compression pays where the second
    is smaller."""
    if op != "all_reduce":
        raise ValueError(f"only all_reduce compresses, not {op}")
    from .hierarchy import two_level

    if len(layout) == 1:
        p = params.at(layout[0])
        return (FORMULAS["all_reduce"]["ring"](float(nbytes), layout[0], p, segment_bytes),
                compressed_ring(float(nbytes), layout[0], p, compress, segment_bytes))
    return (two_level(op, nbytes, layout, params, segment_bytes),
            two_level(op, nbytes, layout, params, segment_bytes, compress=compress))


def pays_from(layout: Sequence[int], params: Params, compress: str, largest: int = 1 << 34,
              segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> Optional[int]:
    """The smallest all-reduce size (powers of two from 1 KiB) from which `compress` is
    predicted PAYS_MARGIN faster than the exact algorithm at every larger size up to
    `largest`; None: never."""
    start = None
    size = largest
    while size >= 1024:
        exact, fast = pays("all_reduce", size, layout, params, compress, segment_bytes)
        if fast > (1 - PAYS_MARGIN) * exact:
            break
        start = size
        size //= 2
    return start
