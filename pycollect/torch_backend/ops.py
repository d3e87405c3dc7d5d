"""torch.distributed reduce ops and options, translated for pycollect's engine.

torch gives a backend a `ReduceOp` object (in the options struct) whose `.op` is a
`RedOpType`. SUM, AVG, PRODUCT, MIN and MAX map one to one onto pycollect's
ReduceOp. PREMUL_SUM (FSDP2's gradient divide factor: `ReduceOp.PREMUL_SUM(1/f)`,
or `_make_nccl_premul_sum(f)`) carries a factor, a float or a 0-d tensor, read from
`.factor`: the backend multiplies each rank's input by it, then sums. The bitwise
ops (BAND, BOR, BXOR) have no engine kernel and raise, naming the method.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
import torch.distributed as dist

from ..types import ReduceOp

_RedOpType = dist.ReduceOp.RedOpType
_PLAIN = {
    _RedOpType.SUM: ReduceOp.SUM,
    _RedOpType.AVG: ReduceOp.AVG,
    _RedOpType.PRODUCT: ReduceOp.PRODUCT,
    _RedOpType.MIN: ReduceOp.MIN,
    _RedOpType.MAX: ReduceOp.MAX,
}
SUPPORTED = "SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM"

Factor = Union[float, torch.Tensor]


def translate(op, method: str) -> Tuple[ReduceOp, Optional[Factor]]:
    """(engine op, premul factor or None) for torch's `op` in backend call `method`."""
    # dist.ReduceOp.SUM itself is a RedOpType (which passes isinstance(., dist.ReduceOp)
    # but has no .op): what a Python caller's pg.allreduce(tensors) ends up with.
    kind = getattr(op, "op", op)
    if kind == _RedOpType.PREMUL_SUM:
        if not hasattr(op, "factor"):
            raise ValueError(f"pycollect backend: {method}: PREMUL_SUM needs its factor; "
                             "pass dist.ReduceOp.PREMUL_SUM(factor)")
        return ReduceOp.SUM, op.factor
    if kind not in _PLAIN:
        name = getattr(kind, "name", repr(kind))
        raise ValueError(f"pycollect backend: {method} does not support ReduceOp.{name}; "
                         f"supported: {SUPPORTED}")
    return _PLAIN[kind], None


def check_premul(tensor: torch.Tensor, factor: Optional[Factor], method: str) -> None:
    """PREMUL_SUM scales the input, which only makes sense for floating tensors."""
    if factor is not None and not tensor.is_floating_point():
        raise TypeError(f"pycollect backend: {method}: PREMUL_SUM needs a floating tensor, got {tensor.dtype}")


def premultiplied(tensor: torch.Tensor, factor: Factor) -> torch.Tensor:
    """A new tensor: `tensor * factor` in tensor's dtype (the input stays untouched)."""
    return torch.mul(tensor, factor).to(tensor.dtype)


def single(tensors, method: str, what: str = "tensors"):
    """The one tensor of torch's per-device list (pycollect drives one device per rank)."""
    if len(tensors) != 1:
        raise ValueError(f"pycollect backend: {method}: expected one tensor per rank in {what}, "
                         f"got {len(tensors)} (multi-device lists are not supported)")
    return tensors[0]
