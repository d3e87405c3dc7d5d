"""torch.distributed reduce ops and options, translated for pycollect's engine.

torch gives a backend a `ReduceOp` object (in the options struct) whose `.op` is a
`RedOpType`. SUM, AVG, PRODUCT, MIN and MAX map one to one onto pycollect's
ReduceOp. PREMUL_SUM (FSDP2's gradient divide factor: `ReduceOp.PREMUL_SUM(1/f)`,
or `_make_nccl_premul_sum(f)`) carries a factor, a float or a 0-d tensor, read from
`.factor`: the backend multiplies each rank's input by it, then sums. The bitwise
ops (BAND, BOR, BXOR) have no engine kernel and raise, naming the method.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from .._buffers import as_buffer
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
# The same keyed by the enum's int: hashing and comparing pybind enums costs ~0.5 us each,
# a dozen times more than int() and a dict of ints (translate runs on every reducing call).
_PLAIN_BY_CODE = {int(kind): op for kind, op in _PLAIN.items()}
_PREMUL_SUM = int(_RedOpType.PREMUL_SUM)
_SUM = dist.ReduceOp.SUM  # a RedOpType: a ReduceOp of SUM compares equal to it, PREMUL_SUM's does not

Factor = Union[float, torch.Tensor]


def translate(op, method: str) -> Tuple[ReduceOp, Optional[Factor]]:
    """(engine op, premul factor or None) for torch's `op` in backend call `method`."""
    # SUM, nearly every call's, by one comparison in C++ (0.1 us; the reads below take 0.6).
    if op == _SUM:
        return ReduceOp.SUM, None
    # dist.ReduceOp.SUM itself is a RedOpType (which passes isinstance(., dist.ReduceOp)
    # but has no .op): what a Python caller's pg.allreduce(tensors) ends up with.
    kind = getattr(op, "op", op)
    code = int(kind)
    if code == _PREMUL_SUM:
        if not hasattr(op, "factor"):
            raise ValueError(f"pycollect backend: {method}: PREMUL_SUM needs its factor; "
                             "pass dist.ReduceOp.PREMUL_SUM(factor)")
        return ReduceOp.SUM, op.factor
    plain = _PLAIN_BY_CODE.get(code)
    if plain is None:
        name = getattr(kind, "name", repr(kind))
        raise ValueError(f"pycollect backend: {method} does not support ReduceOp.{name}; "
                         f"supported: {SUPPORTED}")
    return plain, None


def reduce_args(opts, method: str, inputs: Sequence[torch.Tensor], in_place: bool,
                outputs: Sequence[torch.Tensor] = ()) -> Tuple[ReduceOp, List[torch.Tensor]]:
    """(engine op, the inputs to send) for torch's reduce option `opts` of call `method`.

    PREMUL_SUM, here once for every reducing call: its factor needs floating tensors (each
    input and output is checked), then each input is scaled by it, in place when the call
    reduces in place (after the input is validated as a writable buffer, so a refused call
    leaves it as it was), else into a new tensor (the caller's input stays untouched)."""
    op, factor = translate(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, method)
    inputs = list(inputs)
    if factor is None:
        return op, inputs
    for t in (*inputs, *outputs):
        if not t.is_floating_point():
            raise TypeError(f"pycollect backend: {method}: PREMUL_SUM needs a floating tensor, got {t.dtype}")
    if not in_place:
        return op, [torch.mul(t, factor).to(t.dtype) for t in inputs]
    for t in inputs:
        as_buffer(t, f"{method}(tensor)", writable=True)
    for t in inputs:
        t.mul_(factor)
    return op, inputs


def single(tensors, method: str, what: str = "tensors"):
    """The one tensor of torch's per-device list (pycollect drives one device per rank)."""
    if len(tensors) != 1:
        raise ValueError(f"pycollect backend: {method}: expected one tensor per rank in {what}, "
                         f"got {len(tensors)} (multi-device lists are not supported)")
    return tensors[0]
