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

Beyond the engine's own collectives: sparse all-reduce (SUM) is an all-gather of every
rank's indices and values, summed locally; monitored_barrier meets in the group's store
(so a rank that never arrives is named, and the links stay usable); an engine timeout
surfaces as "Timed out", as Gloo words it. Methods torch may call that the engine cannot
do raise NotImplementedError naming the method.
"""
from __future__ import annotations

import datetime
import os
import time
from typing import List

import torch
import torch.distributed as dist

from .. import api
from .._buffers import as_buffer
from ..errors import PyCollectError
from ..group import ProcessGroup as EngineGroup
from ..rendezvous import _store_host, listen_address
from .ops import reduce_args, single, translate
from .sparse import sparse_all_reduce
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
        # torch gives every group its own PrefixStore, named after the group; a group made
        # again under the same name in this process (destroy_process_group, then
        # init_process_group on the same store) gets keys of its own: its count.
        made = _made.get(group_id, 0)
        _made[group_id] = made + 1
        self._engine = api.register_group(EngineGroup(f"tb{made}", store, range(size), rank, timeout, host))
        self._store = store
        self._timeout = timeout
        self._monitored = 0  # monitored_barrier calls so far (each meets under its own keys)
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
    def _submit(self, method: str, works, result: List[torch.Tensor], source=None) -> TorchWork:
        return self._completer.add(TorchWork(method, works, result, source))

    def _run(self, method: str, opts, result: List[torch.Tensor], tensors, fn, *args, **kwargs) -> TorchWork:
        """`fn(*args, **kwargs, async_op=...)`, a pycollect.api collective: run now, on this
        thread (the engine's inline path), its Work returned already settled, when torch says
        the caller waits for it at once (opts.asyncOp False: async_op=False) and its tensors
        are small: no hand-off to the completer thread and back, which costs more than the
        call itself. Otherwise queued, its Work settled when waited on: an async_op=True call
        never waits for a peer (a rank that issues an async all-reduce, then a send its peer
        needs before that peer joins the all-reduce, must not block in the all-reduce). torch
        without asyncOp in its options (before 2.7) is taken as asynchronous. Bad arguments
        raise here on both paths; the engine's own errors (a lost peer, a mismatch, a
        timeout) are the Work's."""
        if getattr(opts, "asyncOp", True) or not all(_small(t) for t in tensors):
            return self._submit(method, [fn(*args, async_op=True, **kwargs)], result)
        try:
            fn(*args, async_op=False, **kwargs)
        except PyCollectError as e:
            return TorchWork.settled(method, result, e)
        return TorchWork.settled(method, result, None)

    def _many(self, method: str, outputs, inputs, one) -> TorchWork:
        if len(outputs) != len(inputs):
            raise ValueError(f"pycollect backend: {method}: {len(outputs)} outputs for {len(inputs)} inputs")
        works = [one(o, i) for o, i in zip(outputs, inputs)]
        return self._submit(method, works, list(outputs))

    # -- all-reduce --------------------------------------------------------------
    def allreduce(self, tensors, opts=None) -> TorchWork:
        tensor = single(tensors, "allreduce")
        if tensor.is_sparse:
            op, _ = translate(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "allreduce")
            sparse_all_reduce(tensor, op, self._engine)
            return self._submit("allreduce", [], [tensor])
        op, _ = reduce_args(opts, "allreduce", [tensor], in_place=True)
        return self._run("allreduce", opts, [tensor], [tensor], api.all_reduce, tensor, op, group=self._engine)

    def allreduce_coalesced(self, tensors, opts=None) -> TorchWork:
        """One engine call (one header, one pass) per dtype among `tensors`."""
        method = "allreduce_coalesced"
        for t in tensors:
            as_buffer(t, f"{method}(tensor)", writable=True)
        op, tensors = reduce_args(opts, method, tensors, in_place=True)
        by_dtype: dict = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        works = [api.all_reduce_coalesced(ts, op, group=self._engine, async_op=True) for ts in by_dtype.values()]
        return self._submit(method, works, list(tensors))

    # -- reduce / gather / scatter ----------------------------------------------
    def reduce(self, tensors, opts=None) -> TorchWork:
        tensor = single(tensors, "reduce")
        root = opts.rootRank if opts is not None else 0
        op, _ = reduce_args(opts, "reduce", [tensor], in_place=True)
        return self._run("reduce", opts, [tensor], [tensor], api.reduce, tensor, root, op, group=self._engine)

    def gather(self, output_tensors, input_tensors, opts=None) -> TorchWork:
        tensor = single(input_tensors, "gather", "input_tensors")
        root = opts.rootRank if opts is not None else 0
        outputs = single(output_tensors, "gather", "output_tensors") if self.rank() == root else None
        return self._run("gather", opts, list(outputs or []), [tensor, *(outputs or [])], api.gather, tensor, outputs, root,
                         group=self._engine)

    def scatter(self, output_tensors, input_tensors, opts=None) -> TorchWork:
        tensor = single(output_tensors, "scatter", "output_tensors")
        root = opts.rootRank if opts is not None else 0
        inputs = single(input_tensors, "scatter", "input_tensors") if self.rank() == root else None
        return self._run("scatter", opts, [tensor], [tensor, *(inputs or [])], api.scatter, tensor, inputs, root,
                         group=self._engine)

    # -- broadcast / barrier -----------------------------------------------------
    def broadcast(self, tensors, opts=None) -> TorchWork:
        tensor = single(tensors, "broadcast")
        root = opts.rootRank if opts is not None else 0
        return self._run("broadcast", opts, [tensor], [tensor], api.broadcast, tensor, root, group=self._engine)

    def barrier(self, opts=None) -> TorchWork:
        """Times out after opts.timeout if set, else the group's (an error saying "Timed out",
        as Gloo's)."""
        timeout = getattr(opts, "timeout", None)
        timeout = timeout if timeout is not None and timeout.total_seconds() > 0 else None
        return self._run("barrier", opts, [], [], api.barrier, group=self._engine, timeout=timeout)

    def monitored_barrier(self, timeout=None, wait_all_ranks: bool = False) -> None:
        """Gloo's monitored barrier: rank 0 waits up to `timeout` for every other rank to
        arrive, then releases them; it names the first rank that did not arrive (every
        such rank with wait_all_ranks), and a rank that rank 0 does not release in time
        says so. The ranks meet in the group's store, not on the links, so a failed
        monitored barrier leaves the group usable (Gloo's, made of send/recv, also does)."""
        seconds = (timeout.total_seconds() if isinstance(timeout, datetime.timedelta)
                   else self._timeout.total_seconds() if timeout is None else float(timeout))
        ms = int(seconds * 1000)
        key = f"monitored_barrier/{self._monitored}"
        self._monitored += 1
        start = time.monotonic()
        store, rank = self._store, self.rank()
        store.set(f"{key}/arrived/{rank}", "1")
        if rank != 0:
            if not _wait_key(store, f"{key}/released", start + seconds):
                raise RuntimeError(f"Rank {rank} successfully reached monitoredBarrier, but received errors "
                                   f"while waiting for send/recv from rank 0. Please check rank 0 logs for "
                                   f"faulty rank (pycollect backend: not released within {ms} ms).")
            return
        missing = []
        for r in range(1, self.size()):
            if time.monotonic() - start >= seconds and seconds <= 0:
                raise RuntimeError(f"Rank 0 timed out in monitoredBarrier after {ms} ms.")
            if not _wait_key(store, f"{key}/arrived/{r}", start + seconds):
                if not wait_all_ranks:
                    raise RuntimeError(f"Rank {r} failed to pass monitoredBarrier in {ms} ms")
                missing.append(r)
        if missing:
            raise RuntimeError(f"Ranks {', '.join(map(str, missing))} failed to pass monitoredBarrier in {ms} ms")
        store.set(f"{key}/released", "1")

    # -- all-gather --------------------------------------------------------------
    def allgather(self, output_tensors, input_tensors, opts=None) -> TorchWork:
        outputs = single(output_tensors, "allgather", "output_tensors")
        tensor = single(input_tensors, "allgather", "input_tensors")
        return self._run("allgather", opts, list(outputs), [tensor, *outputs], api.all_gather, outputs, tensor,
                         group=self._engine)

    def all_gather_single(self, output, input, opts=None) -> TorchWork:
        return self._run("all_gather_single", opts, [output], [output, input], self._gather_one, output, input)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None) -> TorchWork:
        return self._many("all_gather_single_coalesced", outputs, inputs, self._gather_one)

    def _gather_one(self, output, input, async_op: bool = True):
        return api.all_gather_into_tensor(output, input, group=self._engine, async_op=async_op)

    # torch's older names for the same calls
    _allgather_base = all_gather_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced

    # -- reduce-scatter ----------------------------------------------------------
    def reduce_scatter(self, output_tensors, input_tensors, opts=None) -> TorchWork:
        output = single(output_tensors, "reduce_scatter", "output_tensors")
        inputs = single(input_tensors, "reduce_scatter", "input_tensors")
        op, inputs = reduce_args(opts, "reduce_scatter", inputs, in_place=False, outputs=[output])
        return self._run("reduce_scatter", opts, [output], [output, *inputs], api.reduce_scatter, output, inputs, op,
                         group=self._engine)

    def reduce_scatter_single(self, output, input, opts=None) -> TorchWork:
        return self._run("reduce_scatter_single", opts, [output], [output, input], self._scatter_one, "reduce_scatter_single",
                         output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None) -> TorchWork:
        method = "reduce_scatter_single_coalesced"
        return self._many(method, outputs, inputs, lambda o, i: self._scatter_one(method, o, i, opts))

    def _scatter_one(self, method: str, output, input, opts, async_op: bool = True):
        op, (input,) = reduce_args(opts, method, [input], in_place=False)
        return api.reduce_scatter_tensor(output, input, op, group=self._engine, async_op=async_op)

    _reduce_scatter_base = reduce_scatter_single
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # -- point to point ----------------------------------------------------------
    def send(self, tensors, dstRank: int, tag: int = 0) -> TorchWork:  # noqa: N803
        tensor = single(tensors, "send")
        return self._posted("send", api.post_send(tensor, dstRank, self._engine, tag), [tensor])

    def recv(self, tensors, srcRank: int, tag: int = 0) -> TorchWork:  # noqa: N803
        tensor = single(tensors, "recv")
        return self._posted("recv", api.post_recv(tensor, srcRank, self._engine, tag), [tensor], lambda: srcRank)

    def _posted(self, method: str, work, result: List[torch.Tensor], source=None) -> TorchWork:
        """A point-to-point call posted on the engine: its Work settled at once when the
        engine finished it as it was posted (work None: a small send that left, a receive
        whose bytes were waiting)."""
        if work is None:
            return TorchWork.settled(method, result, None, source)
        return self._submit(method, [work], result, source)

    def recv_anysource(self, tensors, tag: int = 0) -> TorchWork:
        """dist.recv(src=None): the first matching send from any rank (its rank is the
        Work's _source_rank())."""
        tensor = single(tensors, "recv_anysource")
        work = api.irecv(tensor, None, group=self._engine, tag=tag)
        return self._submit("recv_anysource", [work], [tensor], work.source_rank)

    # -- all-to-all and the coalesced all-gather -----------------------------------
    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None) -> TorchWork:
        """dist.all_to_all_single: one engine all-to-all over the chunks."""
        return self._run("alltoall_base", opts, [output], [output, input], api.all_to_all_single, output, input,
                         list(output_split_sizes or []) or None, list(input_split_sizes or []) or None,
                         group=self._engine)

    all_to_all_single = alltoall_base

    def alltoall(self, output_tensors, input_tensors, opts=None) -> TorchWork:
        """dist.all_to_all (list form): one engine all-to-all."""
        return self._run("alltoall", opts, list(output_tensors), [*output_tensors, *input_tensors], api.all_to_all,
                         list(output_tensors), list(input_tensors), group=self._engine)

    def allgather_coalesced(self, output_lists, input_list, opts=None) -> TorchWork:
        """dist.all_gather_coalesced: one engine call for every tensor of the list."""
        work = api.all_gather_coalesced([list(row) for row in output_lists], list(input_list),
                                        group=self._engine, async_op=True)
        return self._submit("allgather_coalesced", [work], [t for row in output_lists for t in row])

    # -- teardown ----------------------------------------------------------------
    def shutdown(self) -> None:
        """Called by dist.destroy_process_group: close the links (a call still blocked raises
        at once: the group was destroyed), then settle the Works torch holds."""
        api.unregister_group(self._engine)
        self._completer.close()

    def abort(self) -> None:
        api.unregister_group(self._engine)
        self._completer.close(timeout=0.0)


_made: dict = {}  # torch group name -> groups of this backend made under it in this process


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


def _wait_key(store, key: str, deadline: float) -> bool:
    """Whether `key` appears in `store` before `deadline` (time.monotonic())."""
    while True:
        if store.check([key]):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


EAGER_MAX_BYTES = 64 * 1024  # blocking collectives up to this size run at once on the caller's thread


def _small(tensor: torch.Tensor) -> bool:
    return not tensor.is_sparse and tensor.nbytes <= EAGER_MAX_BYTES  # nbytes: sparse tensors have none
