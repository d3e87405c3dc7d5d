"""FSDPState: the hooks that drive a model's param groups through a training step.

Forward. The root's pre-forward hook opens the step. Each unit's pre-forward hook
waits for its gather (usually issued earlier as a prefetch), points the module's
attributes at the gathered views, and issues the gather of the next unit in forward
order, so that unit's communication overlaps this unit's compute. Its post-forward
hook frees the unit again (reshard_after_forward=True; the root is kept, as the
backward starts with it) and hooks the unit's outputs so that the moment their
gradient is computed, the unit's backward is about to start.

Backward. That pre-backward hook gathers the unit again and prefetches the next unit
in backward order (the reverse of the order in which units finished their forward).
When the unit's gradient lands in its unsharded buffer (one post-accumulate-grad
hook per unit), the buffer is freed and the gradient reduce-scatter is issued
asynchronously; the backward of earlier units runs while it is on the wire. Only the
previous reduce-scatter is waited for, after the next one is issued. A callback
queued on the autograd engine waits for the last ones and frees whatever is left
when the whole backward is done.

Forward order is recorded on every step and used for the next one; on the first
step the modules' registration order stands in for it. Every rank runs the same
model on the same code path, so every rank issues the same collectives in the same
order, which the engine requires.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch
import torch.nn as nn
from torch.autograd import Variable
from torch.utils._pytree import tree_leaves

from .memory_stats import UnshardedTracker
from .mixed_precision import MixedPrecision, cast_floating
from .param_group import ParamGroup

STATE_ATTR = "_pycollect_fsdp"  # where fully_shard() keeps the FSDPState on the root module


def _order_index(order: List[ParamGroup]) -> Dict[int, Optional[ParamGroup]]:
    """id(unit) -> the unit after it in `order` (None for the last)."""
    return {id(u): (order[i + 1] if i + 1 < len(order) else None) for i, u in enumerate(order)}


def _dedupe(units: List[ParamGroup]) -> List[ParamGroup]:
    seen, out = set(), []
    for u in units:
        if id(u) not in seen:
            seen.add(id(u))
            out.append(u)
    return out


class FSDPState:
    def __init__(self, units: List[ParamGroup], mp: MixedPrecision, reshard_after_forward: bool,
                 tracker: UnshardedTracker, trace: list):
        self.units = units  # pre-order, root first
        self.root_unit = units[0]
        self.mp = mp
        self.reshard_after_forward = reshard_after_forward
        self.tracker = tracker
        self.trace = trace
        self.no_sync = False
        self._next_forward = _order_index(units)
        self._next_backward: Dict[int, Optional[ParamGroup]] = {}
        self._seen_forward: List[ParamGroup] = []
        self._done_forward: List[ParamGroup] = []
        self._backward_started: set = set()
        self._callback_queued = False
        self._reducing: List[ParamGroup] = []  # units with a reduce-scatter in flight, issue order
        self.handles = []
        for unit in units:
            unit.on_grad_ready = self._post_backward
            self.handles.append(unit.module.register_forward_pre_hook(
                lambda m, args, kwargs, u=unit: self._pre_forward(u, args, kwargs), with_kwargs=True))
            self.handles.append(unit.module.register_forward_hook(
                lambda m, args, output, u=unit: self._post_forward(u, output)))

    # -- forward -----------------------------------------------------------------
    def _pre_forward(self, unit: ParamGroup, args, kwargs):
        if unit is self.root_unit:
            self._finish_backward()  # a previous backward that never ran leaves nothing behind
            self._seen_forward, self._done_forward = [], []
            self.tracker.set_phase("forward")
        self._seen_forward.append(unit)
        unit.unshard()
        unit.wait_unshard()
        unit.set_views()
        nxt = self._next_forward.get(id(unit))
        if nxt is not None:
            nxt.unshard()  # prefetch: on the wire while this unit computes
        if self.mp.cast_forward_inputs and self.mp.param_dtype is not None:
            args, kwargs = cast_floating((args, kwargs), self.mp.param_dtype)
        return args, kwargs

    def _post_forward(self, unit: ParamGroup, output):
        self._done_forward.append(unit)
        needs_grad = torch.is_grad_enabled() and unit.full.requires_grad
        outputs = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.requires_grad]
        if needs_grad and outputs:
            for t in outputs:
                t.register_hook(lambda grad, u=unit: self._pre_backward(u))
        is_root = unit is self.root_unit
        if not torch.is_grad_enabled():
            unit.reshard()
        elif self.reshard_after_forward and not is_root:
            unit.reshard()
        if is_root:
            self._end_forward()
            output = cast_floating(output, self.mp.output_dtype)
        return output

    def _end_forward(self) -> None:
        order = _dedupe(self._seen_forward)
        if len(order) == len(self.units):
            self._next_forward = _order_index(order)
        self._next_backward = _order_index(list(reversed(_dedupe(self._done_forward))))
        if not torch.is_grad_enabled():
            for u in self.units:
                u.reshard()
        self.tracker.set_phase("after_forward")

    # -- backward ------------------------------------------------------------------
    def _pre_backward(self, unit: ParamGroup) -> None:
        if id(unit) in self._backward_started:
            return
        self._backward_started.add(id(unit))
        if not self._callback_queued:
            self._callback_queued = True
            self.tracker.set_phase("backward")
            Variable._execution_engine.queue_callback(self._finish_backward)
        unit.unshard()
        unit.wait_unshard()
        nxt = self._next_backward.get(id(unit))
        if nxt is not None:
            nxt.unshard()

    def _post_backward(self, unit: ParamGroup) -> None:
        grad = unit.take_grad()
        unit.reshard()
        if grad is None:
            return
        if self.no_sync:
            unit.keep_local(grad)
            return
        unit.reduce_grad(grad)
        self._reducing.append(unit)
        self._drain(keep=1)  # the previous reduce-scatter is ahead in the queue: cheap to wait

    def _drain(self, keep: int = 0) -> None:
        while len(self._reducing) > keep:
            self._reducing.pop(0).finish_reduce()

    def _finish_backward(self) -> None:
        self._drain(keep=0)
        for u in self.units:
            u.reshard()
        self._backward_started.clear()
        self._callback_queued = False
        self.tracker.set_phase("idle")

    def remove_hooks(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()


def get_state(module: nn.Module) -> FSDPState:
    """The FSDPState of a module returned by fully_shard() or wrapped by FullyShardedDataParallel."""
    state = getattr(module, STATE_ATTR, None)
    if state is None and isinstance(getattr(module, "module", None), nn.Module):
        state = getattr(module.module, STATE_ATTR, None)
    if state is None:
        raise ValueError(f"{type(module).__name__} is not sharded: call fully_shard() on it first")
    return state
