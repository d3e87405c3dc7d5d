"""DistributedDataParallel on pycollect's engine: bucketed gradient averaging that overlaps backward.

The idea (as in torch's DDP; Li et al. 2020, "PyTorch Distributed: Experiences on
Accelerating Data Parallel Training"):

1. Construction. Every rank checks that it holds the same parameters as the others
   (names, shapes, dtypes, requires_grad), then takes rank 0's parameters and buffers,
   so all replicas start identical.
2. Buckets. Parameters are grouped in reverse registration order, which is roughly the
   order in which backward produces their gradients. The first bucket is small (1 MiB,
   as in torch) so that the first all-reduce starts early. The others hold up to
   `bucket_cap_mb`. A bucket holds one dtype and owns one flat buffer.
3. Hooks. When a parameter's gradient has been accumulated, its hook copies
   gradient x 1/world_size into the parameter's slot in its bucket. When the last slot
   of a bucket is filled, the bucket is all-reduced (SUM) asynchronously. The engine
   works on its own thread, without the GIL, while autograd computes the remaining
   gradients. Buckets are launched strictly in index order, so every rank issues the
   same sequence of collectives.
4. End of backward. An autograd callback waits for every bucket and copies the
   averaged values back into `.grad`.

Worked example: 2 ranks, parameters a, b, c (registered in that order), and a cap that
gives buckets [c] and [b, a]. Backward yields c's gradient first, which fills bucket 0,
so all-reduce 0 starts while autograd computes b and a. When a's gradient arrives,
bucket 1 is full and all-reduce 1 starts. At the end of backward we wait for 0 and 1
and set .grad = (g_rank0 + g_rank1) / 2 for a, b and c.

find_unused_parameters=True. After forward, the autograd graph is walked from the
outputs. Parameters that it does not reach will get no gradient, so when backward
starts their slots are filled with zeros (or with their current .grad) and their
buckets are not held back. At the end, a small all-reduce of "used" flags tells which
parameters no rank used. Their .grad is left untouched, as torch does.
"""
from __future__ import annotations

import contextlib
from typing import Dict, List, Optional

import torch
from torch import nn

from .. import api
from .._sync import broadcast_from_root, first_difference

FIRST_BUCKET_BYTES = 1024 * 1024  # torch's dist._DEFAULT_FIRST_BUCKET_BYTES


def _signature(module: nn.Module) -> List[str]:
    return [f"{name} {tuple(p.shape)} {str(p.dtype).replace('torch.', '')} requires_grad={p.requires_grad}"
            for name, p in module.named_parameters()]


def check_same_parameters(module: nn.Module, process_group=None) -> None:
    """Raise ValueError on every rank if any rank's parameters differ (name, shape, dtype)."""
    if api.get_world_size(process_group) == 1:
        return
    problem = first_difference(_signature(module), process_group, noun="parameter")
    if problem:
        raise ValueError(f"DistributedDataParallel: {problem}; every rank must wrap the same model")


def assign_buckets(params: List[torch.Tensor], cap_bytes: int, first_cap_bytes: int) -> List[List[int]]:
    """Indices into `params` per bucket. Parameters are walked in reverse; each dtype has an
    open bucket that closes once it holds at least its cap (the first of each dtype:
    `first_cap_bytes`). Buckets are ordered by their first parameter in that walk."""
    closed: List[List[int]] = []
    open_: Dict[torch.dtype, List] = {}  # dtype -> [indices, bytes]
    started = set()
    for i in reversed(range(len(params))):
        p = params[i]
        cur = open_.setdefault(p.dtype, [[], 0])
        cur[0].append(i)
        cur[1] += p.numel() * p.element_size()
        limit = cap_bytes if p.dtype in started else min(first_cap_bytes, cap_bytes)
        if cur[1] >= limit:
            closed.append(cur[0])
            started.add(p.dtype)
            del open_[p.dtype]
    buckets = closed + [cur[0] for cur in open_.values()]
    return sorted(buckets, key=lambda b: -b[0])


def _output_tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _output_tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _output_tensors(o)


def _reachable_parameters(output) -> set:
    """ids of the leaf tensors that backward from `output` would reach."""
    found, seen = set(), set()
    stack = []
    for t in _output_tensors(output):
        if t.grad_fn is not None:
            stack.append(t.grad_fn)
        elif t.requires_grad:
            found.add(id(t))
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        var = getattr(fn, "variable", None)  # AccumulateGrad nodes hold their leaf
        if var is not None:
            found.add(id(var))
        stack.extend(nxt for nxt, _ in fn.next_functions if nxt is not None)
    return found


class _Bucket:
    __slots__ = ("indices", "offsets", "flat", "pending", "work")

    def __init__(self, indices: List[int], params: List[torch.Tensor]):
        self.indices = indices
        self.offsets, total = [], 0
        for i in indices:
            self.offsets.append(total)
            total += params[i].numel()
        # On the parameters' device: a CUDA model's buckets are reduced as CUDA tensors.
        self.flat = torch.zeros(total, dtype=params[indices[0]].dtype, device=params[indices[0]].device)
        self.pending = len(indices)
        self.work = None


class DistributedDataParallel(nn.Module):
    """Wrap `module` so that backward averages gradients across the ranks of `process_group`.

    process_group: None (pycollect's default group) or a group from pycollect.new_group.
    bucket_cap_mb: size of the buckets after the first (which is at most 1 MiB).
    broadcast_buffers: copy rank 0's buffers (e.g. BatchNorm statistics) before each forward.
    find_unused_parameters: allow parameters that get no gradient in a step.
    """

    def __init__(self, module: nn.Module, process_group=None, bucket_cap_mb: float = 25,
                 broadcast_buffers: bool = True, find_unused_parameters: bool = False):
        super().__init__()
        if not bucket_cap_mb > 0:
            raise ValueError(f"bucket_cap_mb must be > 0, got {bucket_cap_mb!r}")
        self.module = module
        self.process_group = process_group
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = True
        self.world_size = api.get_world_size(process_group)
        check_same_parameters(module, process_group)
        broadcast_from_root(list(module.parameters()) + list(module.buffers()), process_group)

        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        for n, p in named:
            if p.is_sparse or p.layout != torch.strided:
                raise NotImplementedError(f"DistributedDataParallel: parameter {n!r} has layout {p.layout}; "
                                          "only dense parameters are supported")
        cap = int(bucket_cap_mb * 1024 * 1024)
        self._buckets = [_Bucket(b, self._params) for b in assign_buckets(self._params, cap, FIRST_BUCKET_BYTES)]
        self._slot = {}
        for k, b in enumerate(self._buckets):
            for i, off in zip(b.indices, b.offsets):
                self._slot[i] = (k, off)
        self._scale = 1.0 / self.world_size
        self._handles = [p.register_post_accumulate_grad_hook(self._make_hook(i)) for i, p in enumerate(self._params)]
        self._reset()

    # -- per-iteration state -------------------------------------------------
    def _reset(self) -> None:
        self._expect_sync = False  # set by a forward that wants its backward reduced
        self._started = False      # the first hook of that backward has fired
        self._unused: List[int] = []
        self._ready = [False] * len(self._params)
        self._used = torch.zeros(len(self._params), dtype=torch.int32)
        self._next = 0             # next bucket to launch
        for b in self._buckets:
            b.pending = len(b.indices)
            b.work = None

    def _drain(self) -> None:
        """Wait for buckets launched by a backward that never finished (e.g. it raised)."""
        for b in self._buckets:
            if b.work is not None:
                b.work.wait()
        self._reset()

    # -- forward ----------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        if self._started:
            self._drain()
        sync = torch.is_grad_enabled() and self.require_backward_grad_sync
        if self.broadcast_buffers and self.require_forward_param_sync:
            buffers = list(self.module.buffers())
            if buffers and self.world_size > 1:
                broadcast_from_root(buffers, self.process_group)
        output = self.module(*inputs, **kwargs)
        # Like torch: buffers are synced before a forward that follows a synced forward.
        self.require_forward_param_sync = sync
        self._reset()
        if sync:
            self._expect_sync = True
            if self.find_unused_parameters:
                reached = _reachable_parameters(output)
                self._unused = [i for i, p in enumerate(self._params) if id(p) not in reached]
        return output

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate gradients locally; the first synced one reduces the sum."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    # -- backward ---------------------------------------------------------------
    def _make_hook(self, index: int):
        def hook(param: torch.Tensor) -> None:
            if self._expect_sync:
                self._grad_ready(index, param.grad, used=True)
        return hook

    def _grad_ready(self, index: int, grad: Optional[torch.Tensor], used: bool) -> None:
        if not self._started:
            self._started = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finalize)
            for i in self._unused:
                self._grad_ready(i, self._params[i].grad, used=False)
        if self._ready[index]:
            raise RuntimeError(f"DistributedDataParallel: parameter {self._names[index]!r} got a gradient twice "
                               "in one backward pass (reentrant backward or two backward calls per forward?)")
        if grad is not None and grad.is_sparse:
            raise NotImplementedError(f"DistributedDataParallel: sparse gradient for {self._names[index]!r}")
        self._ready[index] = True
        k, off = self._slot[index]
        bucket = self._buckets[k]
        p = self._params[index]
        view = bucket.flat[off:off + p.numel()].view(p.shape)
        with torch.no_grad():
            if grad is None:
                view.zero_()
            else:
                torch.mul(grad, self._scale, out=view)
        if used:
            self._used[index] = 1
        bucket.pending -= 1
        if bucket.pending == 0:
            self._launch_ready()

    def _launch_ready(self) -> None:
        # In bucket order only: every rank must issue the same sequence of all-reduces.
        while self._next < len(self._buckets) and self._buckets[self._next].pending == 0:
            b = self._buckets[self._next]
            if self.world_size > 1:
                b.work = api.all_reduce(b.flat, group=self.process_group, async_op=True)
            self._next += 1

    def _finalize(self) -> None:
        try:
            missing = [i for i, r in enumerate(self._ready) if not r]
            if missing and not self.find_unused_parameters:
                names = [self._names[i] for i in missing]
                raise RuntimeError(
                    f"DistributedDataParallel: parameter(s) {names} got no gradient in this backward pass; "
                    "pass find_unused_parameters=True if some parameters are not used in every step")
            for i in missing:
                self._grad_ready(i, self._params[i].grad, used=False)
            used_work = None
            if self.find_unused_parameters and self.world_size > 1:
                used_work = api.all_reduce(self._used, group=self.process_group, async_op=True)
            for b in self._buckets:
                if b.work is not None:
                    b.work.wait()
            if used_work is not None:
                used_work.wait()
            self._write_back()
        finally:
            self._drain()

    def _write_back(self) -> None:
        with torch.no_grad():
            for b in self._buckets:
                for i, off in zip(b.indices, b.offsets):
                    if self.find_unused_parameters and not self._used[i]:
                        continue  # no rank used it: leave .grad as it is
                    p = self._params[i]
                    view = b.flat[off:off + p.numel()].view(p.shape)
                    if p.grad is None:
                        p.grad = view.clone()
                    else:
                        p.grad.copy_(view)

    # -- introspection --------------------------------------------------------
    def bucket_sizes(self) -> List[int]:
        """Bytes per bucket, in launch order."""
        return [b.flat.numel() * b.flat.element_size() for b in self._buckets]

    def bucket_parameter_names(self) -> List[List[str]]:
        return [[self._names[i] for i in b.indices] for b in self._buckets]
