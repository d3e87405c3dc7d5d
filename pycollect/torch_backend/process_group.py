"""PyCollectProcessGroup: a torch ProcessGroup whose collectives run on one pycollect engine group.

For each group torch calls `create` (registered by pycollect.torch_backend.register) with
the group's own PrefixStore, rank, size and timeout. The result is a Python subclass of
torch's ProcessGroup (torch uses such a subclass as the group itself). Each method
validates through pycollect.api (same checks, same errors as pc.all_reduce & co.),
queues the operation on the group's C++ communicator and returns a Work whose Future a
completer thread fulfils when the engine is done (see work.py). Calls DDP, FSDP2 and
the dist.* functions make from C++ (the reducer's allreduce, DDP's broadcasts and shape
checks) reach these methods through torch's trampoline, so every byte moves on
pycollect's engine; the engine's counters (`engine_group(pg).counters()`) show it.

Methods torch may call that the engine cannot do (gather, scatter, reduce, the list form
of all-to-all, recv from any source, ...) raise NotImplementedError naming the method.
"""
from __future__ import annotations

import os
from typing import List

import torch
import torch.distributed as dist

from .. import api
from .._buffers import as_buffer
from ..group import ProcessGroup as EngineGroup
from ..rendezvous import _store_host, listen_address
from .ops import check_premul, premultiplied, single, translate
from .work import Completer, TorchWork

from . import BACKEND


class PyCollectProcessGroup(dist.ProcessGroup):
    """A torch ProcessGroup whose collectives run on one pycollect engine group.

    Ranks and `rootRank`/`dst`/`src` here are ranks within the group, as torch
    passes them to a backend.
    """

    def __init__(self, store, rank: int, size: int, timeout, group_id: str = ""):
        super().__init__(rank, size)
        host = listen_address(os.environ.get("MASTER_ADDR") or _store_host(store))
        # torch gives every group its own PrefixStore, so one fixed name suffices.
        self._engine = api.register_group(EngineGroup("tb", store, range(size), rank, timeout, host))
        self._group_id = group_id
        self._group_name = group_id
        self._group_desc = ""
        self._completer = Completer(group_id or "tb")

    # -- identity (torch reads these through its trampoline) --------------------
    def getBackendName(self) -> str:  # noqa: N802 (torch's C++ name)
        return BACKEND

    def getGroupName(self) -> str:  # noqa: N802
        return self._group_name

    def setGroupName(self, name: str) -> None:  # noqa: N802
        self._group_name = name

    def getGroupDesc(self) -> str:  # noqa: N802
        return self._group_desc

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802
        self._group_desc = desc

    @property
    def engine(self) -> EngineGroup:
        """The pycollect ProcessGroup underneath (its counters show what ran)."""
        return self._engine

    def __repr__(self) -> str:
        return f"<PyCollectProcessGroup {self._group_name!r} rank {self.rank()}/{self.size()}>"

    # -- helpers -----------------------------------------------------------------
    def _submit(self, method: str, works, result: List[torch.Tensor]) -> TorchWork:
        return self._completer.add(TorchWork(method, works, result))

    def _many(self, method: str, outputs, inputs, one) -> TorchWork:
        if len(outputs) != len(inputs):
            raise ValueError(f"pycollect backend: {method}: {len(outputs)} outputs for {len(inputs)} inputs")
        works = [one(o, i) for o, i in zip(outputs, inputs)]
        return self._submit(method, works, list(outputs))

    # -- all-reduce --------------------------------------------------------------
    def allreduce(self, tensors, opts=None) -> TorchWork:
        tensor = single(tensors, "allreduce")
        return self._submit("allreduce", [self._allreduce_one("allreduce", tensor, opts)], [tensor])

    def allreduce_coalesced(self, tensors, opts=None) -> TorchWork:
        works = [self._allreduce_one("allreduce_coalesced", t, opts) for t in tensors]
        return self._submit("allreduce_coalesced", works, list(tensors))

    def _allreduce_one(self, method: str, tensor, opts):
        op, factor = translate(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, method)
        if factor is not None:
            check_premul(tensor, factor, method)
            # validate before scaling in place, so a refused call leaves the tensor as it was
            as_buffer(tensor, f"{method}(tensor)", writable=True)
            tensor.mul_(factor)
        return api.all_reduce(tensor, op, group=self._engine, async_op=True)

    # -- broadcast / barrier -----------------------------------------------------
    def broadcast(self, tensors, opts=None) -> TorchWork:
        tensor = single(tensors, "broadcast")
        root = opts.rootRank if opts is not None else 0
        return self._submit("broadcast", [api.broadcast(tensor, root, group=self._engine, async_op=True)],
                            [tensor])

    def barrier(self, opts=None) -> TorchWork:
        return self._submit("barrier", [api.barrier(group=self._engine, async_op=True)], [])

    # -- all-gather --------------------------------------------------------------
    def allgather(self, output_tensors, input_tensors, opts=None) -> TorchWork:
        outputs = single(output_tensors, "allgather", "output_tensors")
        tensor = single(input_tensors, "allgather", "input_tensors")
        work = api.all_gather(outputs, tensor, group=self._engine, async_op=True)
        return self._submit("allgather", [work], list(outputs))

    def all_gather_single(self, output, input, opts=None) -> TorchWork:
        return self._submit("all_gather_single", [self._gather_one(output, input)], [output])

    def all_gather_single_coalesced(self, outputs, inputs, opts=None) -> TorchWork:
        return self._many("all_gather_single_coalesced", outputs, inputs, self._gather_one)

    def _gather_one(self, output, input):
        return api.all_gather_into_tensor(output, input, group=self._engine, async_op=True)

    # torch's older names for the same calls
    _allgather_base = all_gather_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced

    # -- reduce-scatter ----------------------------------------------------------
    def reduce_scatter(self, output_tensors, input_tensors, opts=None) -> TorchWork:
        output = single(output_tensors, "reduce_scatter", "output_tensors")
        inputs = single(input_tensors, "reduce_scatter", "input_tensors")
        op, factor = translate(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "reduce_scatter")
        if factor is not None:
            check_premul(output, factor, "reduce_scatter")
            inputs = [premultiplied(t, factor) for t in inputs]
        work = api.reduce_scatter(output, inputs, op, group=self._engine, async_op=True)
        return self._submit("reduce_scatter", [work], [output])

    def reduce_scatter_single(self, output, input, opts=None) -> TorchWork:
        work = self._scatter_one("reduce_scatter_single", output, input, opts)
        return self._submit("reduce_scatter_single", [work], [output])

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None) -> TorchWork:
        method = "reduce_scatter_single_coalesced"
        return self._many(method, outputs, inputs, lambda o, i: self._scatter_one(method, o, i, opts))

    def _scatter_one(self, method: str, output, input, opts):
        op, factor = translate(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, method)
        if factor is not None:
            check_premul(input, factor, method)
            input = premultiplied(input, factor)
        return api.reduce_scatter_tensor(output, input, op, group=self._engine, async_op=True)

    _reduce_scatter_base = reduce_scatter_single
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # -- point to point ----------------------------------------------------------
    def send(self, tensors, dstRank: int, tag: int = 0) -> TorchWork:  # noqa: N803
        tensor = single(tensors, "send")
        return self._submit("send", [api.isend(tensor, dstRank, group=self._engine, tag=tag)], [tensor])

    def recv(self, tensors, srcRank: int, tag: int = 0) -> TorchWork:  # noqa: N803
        tensor = single(tensors, "recv")
        return self._submit("recv", [api.irecv(tensor, srcRank, group=self._engine, tag=tag)], [tensor])

    # -- what the engine cannot do -----------------------------------------------
    def _unsupported(self, method: str, hint: str = ""):
        raise NotImplementedError(
            f"pycollect backend: ProcessGroup.{method} is not supported by the pycollect engine"
            + (f"; {hint}" if hint else "")
        )

    def reduce(self, *args, **kwargs):
        self._unsupported("reduce (dist.reduce)", "use dist.all_reduce")

    def gather(self, *args, **kwargs):
        self._unsupported("gather (dist.gather)", "use dist.all_gather")

    def scatter(self, *args, **kwargs):
        self._unsupported("scatter (dist.scatter)", "use dist.broadcast and slice")

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None) -> TorchWork:
        """dist.all_to_all_single: isend/irecv to every peer at once on the engine."""
        work = api.all_to_all_single(output, input, list(output_split_sizes or []) or None,
                                     list(input_split_sizes or []) or None, group=self._engine, async_op=True)
        return self._submit("alltoall_base", work.works, [output])

    all_to_all_single = alltoall_base

    def alltoall(self, *args, **kwargs):
        self._unsupported("alltoall (dist.all_to_all, list form)", "use dist.all_to_all_single")

    def allgather_coalesced(self, *args, **kwargs):
        self._unsupported("allgather_coalesced (dist.all_gather_coalesced)",
                          "use dist.all_gather_into_tensor per tensor")

    def recv_anysource(self, *args, **kwargs):
        self._unsupported("recv_anysource (dist.recv with src=None)", "name the sender")

    def monitored_barrier(self, *args, **kwargs):
        self._unsupported("monitored_barrier (dist.monitored_barrier)", "use dist.barrier")

    # -- teardown ----------------------------------------------------------------
    def shutdown(self) -> None:
        """Called by dist.destroy_process_group: settle queued Works, close the links."""
        self._completer.close()
        api.unregister_group(self._engine)

    def abort(self) -> None:
        api.unregister_group(self._engine)
        self._completer.close(timeout=0.0)


def engine_group(group=None) -> EngineGroup:
    """The pycollect engine group behind a torch group of this backend (None: the default group)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, PyCollectProcessGroup):
        raise TypeError(f"{pg!r} is not a group of the {BACKEND!r} backend "
                        f"(its backend is {dist.get_backend(pg)!r})")
    return pg.engine


def create(options, backend_options=None) -> PyCollectProcessGroup:
    """torch's creator hook (extended API: one _DistributedBackendOptions)."""
    return PyCollectProcessGroup(options.store, options.group_rank, options.group_size, options.timeout,
                                 str(options.group_id))
