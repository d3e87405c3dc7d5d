"""DDP communication hooks (torch's `DistributedDataParallel.register_comm_hook`).

`compressed_allreduce_hook` all-reduces each gradient bucket compressed (bf16 or int8 on the
wire, docs/compression.md) with error feedback, as 1-bit Adam and PowerSGD do: what the
compression dropped from this rank's gradient at one step is added to its gradient at the
next, so the error does not pile up across steps.

    from pycollect.hooks import CompressionState, compressed_allreduce_hook
    ddp.register_comm_hook(CompressionState(compress="int8"), compressed_allreduce_hook)

Per bucket and step, with e the bucket's residual (zeros at first):
    c = g + e                  the gradient, compensated
    q = decode(encode(c))      c as one encode in the wire format leaves it
    e = c - q                  kept for the next step (one residual per bucket)
    all_reduce(q, AVG, compress=...)
The all-reduce then re-encodes partial sums on their way around the ring (within the bound
the page states); that part of the error is shared by all ranks and is not fed back. The
residual is kept by bucket index: when DDP rebuilds its buckets (after its first step) a
bucket whose size changed starts again from zeros.

The all-reduce runs on pycollect's engine: the group given, else the engine group behind a
torch group of the "pycollect" backend, else pycollect's default group. Its Work completes
the Future DDP waits on from a helper thread, so buckets overlap the backward pass as
torch's own allreduce hook does.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from . import _C
from .api import all_reduce, is_initialized
from .group import ProcessGroup
from .types import Compress, ReduceOp


@dataclass
class CompressionState:
    """The hook's state: the wire format, the group, whether to feed the error back, and
    the residuals (bucket index -> tensor). `group`: a pycollect ProcessGroup, a torch group
    of the "pycollect" backend, or None (the torch default group's engine when it is
    pycollect's, else pycollect's default group)."""

    compress: Any = "int8"
    group: Any = None
    error_feedback: bool = True
    residuals: Dict[int, Any] = field(default_factory=dict)
    _engine: Optional[ProcessGroup] = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def engine(self) -> ProcessGroup:
        if self._engine is None:
            self._engine = _engine_group(self.group)
        return self._engine


def _engine_group(group) -> ProcessGroup:
    if isinstance(group, ProcessGroup):
        return group
    from .torch_backend import engine_group, is_backend

    if group is not None:
        if not is_backend(group):
            raise ValueError("compressed_allreduce_hook: the state's group is neither a pycollect group nor a torch "
                             "group of the \"pycollect\" backend; compression runs in pycollect's engine only")
        return engine_group(group)
    import torch.distributed as dist

    if dist.is_initialized() and is_backend(dist.distributed_c10d._get_default_group()):
        return engine_group(None)
    if is_initialized():
        from .world import default

        return default()
    raise ValueError("compressed_allreduce_hook: no pycollect group to run on: initialise torch.distributed with "
                     "backend=\"pycollect\", or pycollect.init_process_group, or pass CompressionState(group=...)")


def _compensate(state: CompressionState, index: int, buf, code: int):
    """buf <- decode(encode(buf + residual)); the residual <- what that dropped."""
    import torch

    res = state.residuals.get(index)
    if res is None or res.numel() != buf.numel():
        res = torch.zeros_like(buf)
        state.residuals[index] = res
    buf.add_(res)
    res.copy_(buf)
    _C.wire_round_trip(buf.data_ptr(), buf.numel(), code)
    res.sub_(buf)


def compressed_allreduce_hook(state: CompressionState, bucket):
    """DDP comm hook: the bucket averaged over the group, compressed on the wire, with error
    feedback (this module's docstring). float32 CPU buckets only: another dtype raises
    ValueError naming it, a CUDA bucket NotImplementedError."""
    import torch

    buf = bucket.buffer()
    if buf.dtype != torch.float32:
        raise ValueError(f"compressed_allreduce_hook compresses float32 gradients, not {buf.dtype}")
    if buf.device.type != "cpu":
        raise NotImplementedError("compressed_allreduce_hook runs on CPU buckets only: the engine's staged CUDA path "
                                  "has no encoder yet")
    compress = Compress.parse(state.compress, "CompressionState.compress")
    group = state.engine()
    if compress and state.error_feedback:
        with state._lock:
            _compensate(state, bucket.index(), buf, int(compress))
    work = all_reduce(buf, op=ReduceOp.AVG, group=group, async_op=True, compress=compress or None)
    fut: torch.futures.Future = torch.futures.Future()

    def finish() -> None:
        try:
            work.wait()
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits on the Future
            fut.set_exception(e)
            return
        fut.set_result(buf)

    threading.Thread(target=finish, name="pycollect-hook", daemon=True).start()
    return fut
