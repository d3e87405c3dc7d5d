"""What the study tools (benchmark, costmodel, trace) share, so that they count alike:
nccl-tests' sizes, element counts, bus factors and busbw; the buffers and the pycollect
call of one op by its name; and a figure's max over the ranks (the slowest rank's time
is the call's). Pure Python at import; torch and the engine load when a function needs
them.
"""
from __future__ import annotations

import functools
import re
from typing import List, Optional

from .types import DTYPE_SIZES, ReduceOp

_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "M": 1024**2, "MB": 1024**2, "G": 1024**3, "GB": 1024**3}
# The dtypes the tools measure, with their sizes (pycollect.types holds them for every dtype).
DTYPE_BYTES = {d: DTYPE_SIZES[d] for d in ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32",
                                           "int64")}
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


def bus_bandwidth(op: str, nbytes: float, world_size: int, seconds: float) -> float:
    """nccl-tests' busbw in bytes/s: nbytes / seconds x the op's bus factor."""
    return nbytes / seconds * bus_factor(op, world_size) if seconds > 0 else float("inf")


def buffers(op: str, count: int, n: int, dtype, device: str = "cpu"):
    """(a, b) for one call of `op` on `count` elements in all (torch tensors on `device`):
    the input (in place for all_reduce / broadcast) and the output (None there)."""
    import torch

    if op == "all_gather":
        return torch.zeros(count // n, dtype=dtype, device=device), torch.empty(count, dtype=dtype, device=device)
    if op == "reduce_scatter":
        return torch.zeros(count, dtype=dtype, device=device), torch.empty(count // n, dtype=dtype, device=device)
    return torch.zeros(count, dtype=dtype, device=device), None


_OP_FUNCTIONS: dict = {}  # op name -> pycollect function, filled on first use (the engine loads then)


def op_function(op: str):
    """The public pycollect function behind an op name of OPS."""
    if not _OP_FUNCTIONS:
        from . import api

        _OP_FUNCTIONS.update(all_reduce=api.all_reduce, all_gather=api.all_gather_into_tensor,
                             reduce_scatter=api.reduce_scatter_tensor, broadcast=api.broadcast)
    return _OP_FUNCTIONS[op]


def run_op(op: str, a, b, group=None, algo: Optional[str] = None) -> None:
    """One pycollect call of `op` on buffers()'s (a, b); `algo` (pycollect.types.CALL_ALGOS)
    None or "auto": the group's choice; broadcast's root is rank 0."""
    op_caller(op, a, b, group, algo)()


def op_caller(op: str, a, b, group=None, algo: Optional[str] = None):
    """run_op's call as a function of no arguments (what a timed loop calls). Its arguments
    are positional: a partial's keywords cost a dictionary a call (0.1-0.2 us), the harness's
    cost and not the call's."""
    fn = op_function(op)
    if op == "broadcast":
        args = (a, 0, group)
    elif op == "all_reduce":
        args = (a, ReduceOp.SUM, group)
    elif op == "all_gather":
        args = (b, a, group)
    else:
        args = (b, a, ReduceOp.SUM, group)
    if algo and algo != "auto":
        return functools.partial(fn, *args, False, algo)  # async_op, then algo
    return functools.partial(fn, *args)


def max_over_ranks(value: float, group=None) -> float:
    """The largest of every rank's `value` (a collective call: every rank of `group` makes it)."""
    import numpy as np

    from . import api

    t = np.array([value], dtype=np.float64)
    api.all_reduce(t, op=api.ReduceOp.MAX, group=group)
    return float(t[0])
