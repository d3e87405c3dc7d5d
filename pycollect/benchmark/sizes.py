"""Sizes, counts and bus-bandwidth factors, as nccl-tests defines them."""
from __future__ import annotations

import re
from typing import List

_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "M": 1024**2, "MB": 1024**2, "G": 1024**3, "GB": 1024**3}
DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "int32": 4,
               "int64": 8}
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def parse_size(text: str) -> int:
    """'8' -> 8, '64K' -> 65536, '64M' -> 67108864."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?B?)\s*", str(text).upper())
    if not m:
        raise ValueError(f"cannot read size {text!r}: use a byte count with an optional K, M or G")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def format_size(n: int) -> str:
    for unit, div in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def size_list(minbytes: int, maxbytes: int, factor: float) -> List[int]:
    if minbytes <= 0 or maxbytes < minbytes:
        raise ValueError(f"need 0 < min <= max, got {minbytes} and {maxbytes}")
    if factor <= 1:
        raise ValueError(f"step factor must be > 1, got {factor}")
    out, s = [], minbytes
    while s <= maxbytes:
        out.append(int(s))
        s *= factor
    return out


def bus_factor(op: str, n: int) -> float:
    """busbw = algbw x this (nccl-tests PERFORMANCE.md)."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    return 1.0


def elements(op: str, size: int, n: int, esize: int) -> int:
    """Total element count for `size` bytes, a multiple of n for the gather/scatter ops."""
    count = size // esize
    if op in ("all_gather", "reduce_scatter"):
        count -= count % n
    return count
