"""The simplest correct data parallelism, for reading: one all-reduce per parameter, after backward.

    model = NaiveDistributedDataParallel(model)   # rank 0's weights on every rank
    loss_fn(model(x), y).backward()               # .grad is averaged when this returns
    optimizer.step()

What it does:
1. Construction: every parameter and buffer is broadcast from rank 0, so all replicas
   start equal. After that they stay equal, because every rank applies the same
   averaged gradient.
2. Forward: just the wrapped module.
3. Backward: autograd fills .grad as usual. The first gradient hook queues a callback
   that runs when backward is over. The callback all-reduces each .grad (SUM), one
   parameter at a time in registration order, and divides by the world size.

What it gives up compared with pycollect.ddp.DistributedDataParallel: communication
starts only after backward has finished (no overlap), and it sends one small message
per parameter instead of a few large buckets.

`comm` is the module the collectives come from. By default it is pycollect.api, but
torch.distributed works as well, since it has the same names. `process_group` belongs
to that module.
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn

from .. import api
from .._sync import average_gradients, broadcast_from_root


class NaiveDistributedDataParallel(nn.Module):
    def __init__(self, module: nn.Module, process_group=None, comm=None):
        super().__init__()
        self.module = module
        self.process_group = process_group
        self.comm = api if comm is None else comm
        self.world_size = self.comm.get_world_size(process_group)
        self.require_backward_grad_sync = True
        self._callback_queued = False
        broadcast_from_root(list(module.parameters()) + list(module.buffers()), process_group, self.comm)
        for p in module.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._on_grad)

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Inside, gradients accumulate locally; the next backward outside averages the sum."""
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = True

    def _on_grad(self, param: torch.Tensor) -> None:
        # Runs once per parameter during backward; only the first one queues the reduction.
        if self.require_backward_grad_sync and not self._callback_queued:
            self._callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._after_backward)

    def _after_backward(self) -> None:
        self._callback_queued = False
        self.sync_gradients()

    def sync_gradients(self) -> None:
        """Average .grad over the ranks, one blocking all-reduce per parameter (a parameter
        that got no gradient here takes part with zeros)."""
        params = [p for p in self.module.parameters() if p.requires_grad]
        average_gradients(params, self.world_size, self.process_group, self.comm)
