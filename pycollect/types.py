"""ReduceOp, Algo, TraceEvent and the mapping of torch / numpy dtypes onto the engine's codes."""
from __future__ import annotations

import enum
import sys
from typing import NamedTuple

# Codes shared with csrc/common/types.h.
DTYPE_CODES = {
    "float32": 0,
    "float64": 1,
    "float16": 2,
    "bfloat16": 3,
    "int8": 4,
    "uint8": 5,
    "int32": 6,
    "int64": 7,
    "int16": 8,
    "bool": 9,  # SUM and MAX are a logical OR, PRODUCT and MIN an AND (as Gloo's)
}
SUPPORTED_DTYPES = tuple(DTYPE_CODES)
DTYPE_SIZES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "int32": 4,
               "int64": 8, "int16": 2, "bool": 1}  # bytes an element; codes and sizes are the engine's
# (csrc/common/types.cc, pycollect._C.DTYPES), copied so that importing this loads no engine


class ReduceOp(enum.IntEnum):
    """Reduction operators, named as in torch.distributed.ReduceOp. AVG takes floating
    dtypes only; the bitwise BAND, BOR and BXOR integer and bool dtypes only (as Gloo)."""

    SUM = 0
    PRODUCT = 1
    MIN = 2
    MAX = 3
    AVG = 4
    BAND = 5
    BOR = 6
    BXOR = 7
    PROD = 1  # alias of PRODUCT (NCCL's and numpy's spelling)


class Algo(enum.IntEnum):
    """Collective algorithms (codes shared with csrc/common/types.h; docs/algorithms.md
    describes each). all_reduce: RING, DIRECT, HALVING_DOUBLING, TREE; all_gather: RING,
    BRUCK; reduce_scatter and broadcast: RING (broadcast's a chain along the ring). Every
    one of them also HIERARCHICAL: within hosts, then across them (docs/hierarchy.md), and
    SHM: through one shared-memory segment of the group, whose ranks share a host
    (docs/algorithms.md, "Shared-memory collectives"). AUTO picks SHM on one host for the
    all-reduce, all-gather and reduce-scatter at every size, the broadcast up to 256 KiB (1
    MiB on more than 2 ranks; PYCOLLECT_SHM_COLLECTIVE_BYTES sets one limit for all);
    otherwise it picks by size and group size
    from the cost model's table (pycollect.costmodel; PYCOLLECT_MODEL), or with PYCOLLECT_DIRECT_MAX_BYTES set, DIRECT up to that size on
    small groups and RING above; on a group that spans hosts, HIERARCHICAL from the size
    the two-level model names (pycollect.tuning.hierarchy)."""

    AUTO = 0
    RING = 1
    DIRECT = 2
    HALVING_DOUBLING = 3
    TREE = 4
    BRUCK = 5
    HIERARCHICAL = 6
    SHM = 7

    @classmethod
    def parse(cls, value, what: str) -> "Algo":
        """An Algo from itself or its name ("ring", case-insensitive); ValueError naming `what` otherwise."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        names = ", ".join(a.name.lower() for a in cls)
        raise ValueError(f"{what}={value!r}: choose one of {names}")

    @classmethod
    def for_call(cls, call: str, value, default: "Algo", name: str = "") -> "Algo":
        """The algorithm `call` (a key of CALL_ALGOS) runs: `value` (an Algo or its
        name) when given, ValueError naming it (and the function `name`, default `call`) if
        `call` has no such algorithm; else the group's `default` (PYCOLLECT_ALGO) where
        `call` has it, AUTO otherwise (so PYCOLLECT_ALGO=bruck changes the all-gathers and
        leaves the all-reduces alone)."""
        choices = CALL_ALGOS[call]
        if value is None:
            return default if default in choices else cls.AUTO
        name = name or call
        algo = cls.parse(value, f"{name}(algo)")
        if algo not in choices:
            names = ", ".join(a.name.lower() for a in choices)
            raise ValueError(f"{name}(algo)={algo.name.lower()!r} is not an algorithm of {name}: "
                             f"choose one of {names}")
        return algo


class Compress(enum.IntEnum):
    """An all-reduce's wire format (codes shared with csrc/common/types.h;
    docs/compression.md): NONE sends float32 as it is; BF16 sends bfloat16 (half the
    bytes); INT8 sends int8 in blocks of 256 values with a float32 scale each (about a
    quarter). Sums are made in float32 and every rank ends with the same bits."""

    NONE = 0
    BF16 = 1
    INT8 = 2

    @classmethod
    def parse(cls, value, what: str) -> "Compress":
        """A Compress from itself, its name ("int8", case-insensitive) or None (NONE)."""
        if value is None:
            return cls.NONE
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        names = ", ".join(repr(c.name.lower()) for c in cls)
        raise ValueError(f"{what}={value!r}: choose one of {names} (or None)")


# The algorithms each call with a choice can run.
CALL_ALGOS = {
    "all_reduce": (Algo.AUTO, Algo.RING, Algo.DIRECT, Algo.HALVING_DOUBLING, Algo.TREE, Algo.HIERARCHICAL,
                   Algo.SHM),
    "all_gather": (Algo.AUTO, Algo.RING, Algo.BRUCK, Algo.HIERARCHICAL, Algo.SHM),
    "reduce_scatter": (Algo.AUTO, Algo.RING, Algo.HIERARCHICAL, Algo.SHM),
    "broadcast": (Algo.AUTO, Algo.RING, Algo.HIERARCHICAL, Algo.SHM),
}


class TraceEvent(NamedTuple):
    """One engine event of a traced call (csrc/trace/event.h; docs/traces.md).

    `type` is send_posted, send_done, recv_posted, recv_done, reduce_start or reduce_end;
    `ns` is CLOCK_MONOTONIC (time.monotonic_ns(): one clock for all processes of the
    machine); `op` and `seq` name the call; `phase`, `step`, `chunk` and `segment` the
    part of the algorithm (-1: not named by it); `peer` the group rank at the link's
    other end (-1 for reductions); `rank` the group rank that recorded it."""

    rank: int
    ns: int
    type: str
    op: str
    seq: int
    phase: str
    step: int
    chunk: int
    segment: int
    peer: int
    bytes: int


def to_reduce_op(op) -> ReduceOp:
    """Accept our ReduceOp, torch.distributed.ReduceOp, or a name like "sum"."""
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, str):
        name = op.upper()
    elif isinstance(op, int) and not isinstance(op, bool):
        try:
            return ReduceOp(op)
        except ValueError:
            raise ValueError(f"unknown reduce op {op!r}; use one of {[o.name for o in ReduceOp]}") from None
    else:
        # torch.distributed.ReduceOp / RedOpType print as e.g. "ReduceOp.SUM" or "RedOpType.SUM"
        name = str(op).rsplit(".", 1)[-1].upper()
    if name == "PREMUL_SUM":
        raise ValueError("ReduceOp.PREMUL_SUM is only accepted through the torch.distributed backend")
    if name not in ReduceOp.__members__:
        raise ValueError(f"unknown reduce op {op!r}; use one of SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR")
    return ReduceOp[name]


def torch_dtype_name(dtype) -> str:
    """'torch.float32' -> 'float32'."""
    return str(dtype).replace("torch.", "")


def is_torch_tensor(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)
