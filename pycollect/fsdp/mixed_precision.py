"""Mixed-precision policy: which dtype parameters are gathered in, gradients reduced in,
and outputs returned in. The shards the optimizer updates always stay fp32."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch.utils._pytree import tree_map

_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class MixedPrecision:
    """param_dtype: dtype of the gathered parameters, so of forward/backward compute
    (None: the shard dtype, fp32). reduce_dtype: dtype of the gradient reduce-scatter
    (None: param_dtype). output_dtype: cast the root's floating outputs to it (None:
    leave them). cast_forward_inputs: cast each unit's floating inputs to param_dtype.
    """

    param_dtype: Optional[torch.dtype] = None
    reduce_dtype: Optional[torch.dtype] = None
    output_dtype: Optional[torch.dtype] = None
    cast_forward_inputs: bool = True

    def __post_init__(self):
        for field in ("param_dtype", "reduce_dtype", "output_dtype"):
            dtype = getattr(self, field)
            if dtype is not None and dtype not in _FLOATS:
                raise ValueError(f"MixedPrecision.{field}={dtype} is not a floating dtype the engine moves; "
                                 f"use one of {', '.join(str(d) for d in _FLOATS)}")

    def compute_dtype(self, shard_dtype: torch.dtype) -> torch.dtype:
        return self.param_dtype or shard_dtype

    def grad_reduce_dtype(self, shard_dtype: torch.dtype) -> torch.dtype:
        return self.reduce_dtype or self.compute_dtype(shard_dtype)


def cast_floating(tree: Any, dtype: Optional[torch.dtype]) -> Any:
    """Cast every floating-point tensor in a (nested) structure to `dtype`."""
    if dtype is None:
        return tree

    def cast(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != dtype:
            return x.to(dtype)
        return x

    return tree_map(cast, tree)
