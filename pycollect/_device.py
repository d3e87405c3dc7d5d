"""Which path a call's buffers take: host memory (the engine directly) or device memory
(CUDA tensors, staged by the engine through pinned host memory, csrc/comm/staging.cc).

    call = device_call(g, bufs, "all_reduce")   # None: host path; else (device, stream)
    through_host(inputs, outputs, run)          # the irregular calls' staging (below)

Every check runs before anything is sent: CPU and CUDA tensors mixed in one call, a
CUDA tensor on another device than the group's (the group takes the device of its first
CUDA call), and CUDA missing at run time each raise a clear error.

Stream order, as NCCL: the engine records an event on the caller's current stream when
the call is issued, and its copies wait for it. wait() makes the caller's current stream
wait for the result and returns at once, the host not blocked (on the call's `done`
event once it ended on the host, else on its flag word: csrc/comm/staging.cc, "Waiting
for a call"); work queued on that stream afterwards sees the result, and the group keeps
the tensors until the copies are done. wait(blocking=True), or PYCOLLECT_BLOCKING_WAIT=1,
blocks the host until the result is in device memory (pycollect.work.Work).

The irregular calls (gather, scatter, all_to_all, the coalesced calls, send/recv) are
staged here instead, more simply: each CUDA input is copied to a pinned CPU tensor (on
the caller's current stream, so after the work queued there; the copy blocks the host),
the CPU call runs, and each output is copied back to its CUDA tensor when the call
completes (in wait(), or at once for a blocking call). Correct, but not pipelined.
"""
from __future__ import annotations

import threading
from typing import Callable, Optional, Sequence, Tuple

from ._buffers import Buffer
from .types import is_torch_tensor

_local = threading.local()  # .inside: a through_host call is running its CPU call


def device_call(g, bufs: Sequence[Buffer], what: str) -> Optional[Tuple[int, int]]:
    """(CUDA device, caller's stream) if `bufs` live in device memory, None for host memory."""
    for b in bufs:
        if b.device is not None:
            break
    else:  # host memory only, the common case: asked without building lists
        if g.host_device and not getattr(_local, "inside", False):
            return (0, 0)  # tests: host memory plays the device's (ProcessGroup.use_host_device)
        return None
    on_device = [b.device is not None for b in bufs]
    if any(on_device) and not all(on_device):
        names = ", ".join(f"{'cuda:%d' % b.device if b.device is not None else 'cpu'}" for b in bufs)
        raise ValueError(f"{what}: CPU and CUDA tensors are mixed in one call ({names}); move them to one device")
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"{what}: CUDA tensors given but CUDA is not available at run time")
    devices = {b.device for b in bufs}
    if len(devices) > 1:
        raise ValueError(f"{what}: tensors on several CUDA devices {sorted(devices)}; a call uses one device")
    device = devices.pop()
    if g.cuda_device is None:
        g.cuda_device = device
    elif device != g.cuda_device:
        raise ValueError(f"{what}: tensor is on cuda:{device} but this group's CUDA device is cuda:{g.cuda_device} "
                         "(the device of its first CUDA call); use one device per group")
    return device, torch.cuda.current_stream(device).cuda_stream


def needs_host_staging(g, tensors: Sequence, what: str) -> bool:
    """True if the irregular call `what` must go through through_host: its tensors are CUDA
    tensors (checked as device_call does), or the group stages host memory in tests."""
    if not g.host_device:
        for t in tensors:  # a loop, not any(...): a generator costs more than a small call's question
            if getattr(t, "is_cuda", False) is True:
                break
        else:
            return False  # the common case, host tensors, asked cheaply
    if getattr(_local, "inside", False):
        return False
    flat = [t for t in tensors if t is not None]
    cuda = [is_torch_tensor(t) and t.is_cuda for t in flat]
    if any(cuda) and not all(cuda):
        raise ValueError(f"{what}: CPU and CUDA tensors are mixed in one call; move them to one device")
    if any(cuda):
        from ._buffers import as_buffer

        device_call(g, [as_buffer(t, what) for t in flat], what)
        return True
    return g.host_device and all(is_torch_tensor(t) for t in flat)


def _to_host(t):
    import torch

    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=t.is_cuda)
    host.copy_(t)  # on the current stream; returns once the bytes are here
    return host


def through_host(inputs: Sequence, outputs: Sequence, run: Callable):
    """Run `run(host_inputs, host_outputs)` (the CPU call; returns a Work, or None when it
    already completed) on CPU copies of `inputs`; copy `host_outputs` back into `outputs`
    when it completes. An output that is also an input (in place) shares its copy."""
    host_in = [_to_host(t) for t in inputs]
    by_id = {id(t): h for t, h in zip(inputs, host_in)}
    host_out = [by_id.get(id(t)) if id(t) in by_id else _to_host(t) for t in outputs]

    def copy_back() -> None:
        for t, h in zip(outputs, host_out):
            t.copy_(h)

    _local.inside = True
    try:
        work = run(host_in, host_out)
    finally:
        _local.inside = False
    if work is None:
        copy_back()
        return None
    previous = work._finish

    def finish() -> None:
        if previous is not None:
            previous()
        copy_back()

    work._finish = finish
    return work
