"""ReduceOp, Algo and the mapping of torch / numpy dtypes onto the engine's codes."""
from __future__ import annotations

import enum
import sys

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
}
SUPPORTED_DTYPES = tuple(DTYPE_CODES)


class ReduceOp(enum.IntEnum):
    """Reduction operators, named as in torch.distributed.ReduceOp."""

    SUM = 0
    PRODUCT = 1
    MIN = 2
    MAX = 3
    AVG = 4
    PROD = 1  # alias of PRODUCT (NCCL's and numpy's spelling)


class Algo(enum.IntEnum):
    """Collective algorithms (codes shared with csrc/common/types.h). AUTO picks by size and
    group size from the cost model's table (pycollect.costmodel; PYCOLLECT_MODEL), or with
    PYCOLLECT_DIRECT_MAX_BYTES set, DIRECT up to that size on small groups and RING above.
    HALVING_DOUBLING and TREE are all-reduces, BRUCK an all-gather."""

    AUTO = 0
    RING = 1
    DIRECT = 2
    HALVING_DOUBLING = 3
    TREE = 4
    BRUCK = 5

    @classmethod
    def parse(cls, value, what: str) -> "Algo":
        """An Algo from itself or its name ("ring", case-insensitive); ValueError naming `what` otherwise."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        names = ", ".join(a.name.lower() for a in cls)
        raise ValueError(f"{what}={value!r}: choose one of {names}")


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
        raise ValueError(f"unknown reduce op {op!r}; use one of SUM, PRODUCT, MIN, MAX, AVG")
    return ReduceOp[name]


def torch_dtype_name(dtype) -> str:
    """'torch.float32' -> 'float32'."""
    return str(dtype).replace("torch.", "")


def is_torch_tensor(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)
