"""torch.distributed-style functions on pycollect's engine.

    import pycollect as pc
    pc.init_process_group()              # torchrun's, mpirun's or srun's env, or rank=, world_size=, init_method=
    pc.all_reduce(t)                     # in place, SUM
    w = pc.all_gather_into_tensor(out, t, async_op=True); w.wait()

Tensors are contiguous torch CPU or CUDA tensors, or numpy arrays (CUDA: _device.py). Source/destination ranks
(`src`, `dst`) are global ranks, as in torch.distributed.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import sys
from typing import Iterator, List, Optional, Sequence

from ._buffers import (
    as_buffer,
    check_list,
    check_numel,
    check_same_dtype,
    concat_flat,
    empty_like_flat,
)
from . import _C, world
from ._device import device_call, needs_host_staging, through_host
from .topology import Topology
from .group import NON_GROUP_MEMBER, ProcessGroup
from .options import Options, to_timedelta
from .rendezvous import listen_address, rendezvous
from .types import CALL_ALGOS, DTYPE_SIZES, Algo, Compress, ReduceOp, TraceEvent, is_torch_tensor, to_reduce_op
from .work import Work
from .world import default as _default, resolve as _group


def init_process_group(backend: Optional[str] = None, init_method: Optional[str] = None, timeout=None,
                       world_size: int = -1, rank: int = -1, store=None, group_name: str = "",
                       **unused) -> None:
    """Join the default group. With no arguments, reads the launcher's environment: torchrun's
    RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or mpirun's or srun's (launcher.py, docs/launchers.md)."""
    if world.default_group is not None:
        raise RuntimeError("init_process_group() was already called; call destroy_process_group() first")
    if backend not in (None, "pycollect"):
        raise ValueError(f"pycollect.init_process_group only runs the 'pycollect' backend, not {backend!r}; "
                         "for torch.distributed with another backend use torch.distributed directly")
    td = to_timedelta(timeout)
    rv = rendezvous(init_method, rank, world_size, store, td)
    world.store, world.global_rank = rv.store, rv.rank
    world.host = listen_address(rv.master_addr)
    world.default_group = ProcessGroup(f"g{world.group_seq}", world.store, range(rv.world_size), rv.rank, td,
                                       world.host)
    world.group_seq += 1
    world.groups.append(world.default_group)


def is_initialized() -> bool:
    return world.default_group is not None


def new_group(ranks: Optional[Sequence[int]] = None, timeout=None, backend: Optional[str] = None,
              pg_options: Optional[Options] = None, **unused):
    """Make a sub-group with its own links. Every rank of the default group must call it,
    in the same order; ranks outside `ranks` get NON_GROUP_MEMBER. `pg_options` (torch's
    name): the group's pycollect.Options, e.g. dataclasses.replace(Options.from_env(),
    transport="tcp"); default Options.from_env()."""
    if pg_options is not None and not isinstance(pg_options, Options):
        raise TypeError(f"new_group(pg_options=): expected pycollect.Options, got {type(pg_options).__name__}")
    everyone = _default()
    members = list(range(everyone.size)) if ranks is None else sorted(int(r) for r in ranks)
    if len(set(members)) != len(members) or not members:
        raise ValueError(f"new_group: ranks must be distinct and non-empty, got {ranks!r}")
    for r in members:
        if not 0 <= r < everyone.size:
            raise ValueError(f"new_group: rank {r} is outside the world [0, {everyone.size})")
    name = f"g{world.group_seq}"
    world.group_seq += 1  # advanced on every rank, members or not
    if world.global_rank not in members:
        return NON_GROUP_MEMBER
    td = to_timedelta(timeout) if timeout is not None else everyone.timeout
    g = ProcessGroup(name, world.store, members, world.global_rank, td, world.host, pg_options)
    world.groups.append(g)
    return g


def shrink_group(ranks_to_exclude: Sequence[int], group=None, abort: bool = True) -> ProcessGroup:
    """The group (None: the default one) without `ranks_to_exclude` (ranks of that group),
    as torch's shrink_group: typically after a call raised PeerLostError naming a lost rank,
    every survivor calls it with that rank, and goes on with the group it returns (the
    survivors renumbered in order). The group shrunk is destroyed; with `abort` first, so
    that a call still blocked on it ends at once. Shrinking the default group makes the new
    one the default and destroys every other group (their ranks are renumbered), as torch
    does. Ranks that disagree about whom to exclude raise MismatchError naming both views;
    a survivor that never calls it, CollectiveTimeoutError naming it (docs/architecture.md)."""
    g = _group(group)
    new = g.shrunk(ranks_to_exclude, abort=abort)
    if g is world.default_group:
        for other in [o for o in world.groups if o is not g]:
            destroy_process_group(other)
        world.default_group, world.global_rank = new, new.rank
    destroy_process_group(g)
    world.groups.append(new)
    return new


def register_group(group: ProcessGroup) -> ProcessGroup:
    """Let a group made outside new_group (the torch backend makes one per torch group) be
    passed as group= to every call here, and be destroyed with the others."""
    if not isinstance(group, ProcessGroup):
        raise TypeError(f"register_group takes a pycollect ProcessGroup, got {type(group).__name__}")
    if group not in world.groups:
        world.groups.append(group)
    return group


def unregister_group(group: ProcessGroup) -> None:
    """Close a registered group's links and forget it; nothing happens if it is already gone."""
    if group in world.groups:
        destroy_process_group(group)


def destroy_process_group(group=None) -> None:
    """Close a group's links; without an argument, every group and the default one, and
    group names start again from g0 (as torch's group count does): processes that
    re-initialise together agree on names whatever groups each made before, and the
    rendezvous never reads an earlier group's keys (formation.Formation._exchange)."""
    if group is NON_GROUP_MEMBER:
        return
    if group is None:
        for g in reversed(world.groups):
            g.destroy()
        world.groups.clear()
        world.default_group = None
        world.store = None
        world.group_seq = 0
        return
    g = _group(group)
    g.destroy()
    world.groups.remove(g)
    if g is world.default_group:
        world.default_group = None


atexit.register(destroy_process_group)


def get_rank(group=None) -> int:
    if group is None:
        _default()
        return world.global_rank
    return _group(group).rank


def get_world_size(group=None) -> int:
    return _group(group).size


def get_backend(group=None) -> str:
    _group(group)
    return "pycollect"


class _ProfilerFlag:
    """Stands in for torch.autograd.profiler where it lacks the flag below (another torch)."""

    @property
    def _is_profiler_enabled(self) -> bool:
        import torch

        return torch.autograd._profiler_enabled()


_torch_profiler = None  # torch.autograd.profiler (or _ProfilerFlag), once torch is imported


def _profiler_active() -> bool:
    """Whether a torch profiler is recording: torch.autograd.profiler keeps a Python flag for
    checks like this one (set while any profiler, torch.profiler.profile included, runs), so
    the check is two attribute loads. torch is never imported for it: a process that has not
    imported torch has no profiler."""
    global _torch_profiler
    if _torch_profiler is None:
        module = sys.modules.get("torch.autograd.profiler")
        if module is None:
            return False
        _torch_profiler = module if hasattr(module, "_is_profiler_enabled") else _ProfilerFlag()
    return _torch_profiler._is_profiler_enabled


# The API's blocking calls on plain host buffers in one crossing into C++ (csrc/bindings/
# register_fast_calls.cc): FastFront takes a call's own arguments and answers None when the
# call ran to its end, False when it declined (nothing issued: the general path runs, and
# raises what is wrong), else the engine's Work of a call it issued that did not end on this
# thread, which _waited waits on. The public functions that have a fast call are made C
# entries at the end of this module (_FAST_CALLS, _fast_entries): the functions below are
# their general paths. A call's algo= goes with it where it is an Algo or a name in lower or
# upper case that the call has (CALL_ALGOS: the codes below); any other value declines, and
# the general path raises or takes it (a name in mixed case) as it would.
_FAST_ALGO_CODES = {call: {key: int(a) for a in algos for key in (a, a.name.lower(), a.name)}
                    for call, algos in CALL_ALGOS.items()}
_fast = _C.fast_front(world, Algo, _FAST_ALGO_CODES)


def _waited(issued, group, *keepalive) -> None:
    """Wait for a call the fast path issued that did not end there (another thread's call
    ran first, or it failed), as for any blocking call: its error raised as any Work's.
    `keepalive`: the call's buffers (tensors, or their lists), held until it ends."""
    _group(group).wait_issued(issued, keepalive)


def _async_work(issued, group, *keepalive) -> Work:
    """The Work of an async_op=True call the fast path queued (its buffers are already in the
    group's list of calls in flight, as ProcessGroup.submit leaves them)."""
    return Work(_group(group), issued, keepalive)


def _receiving(work: Work, g: ProcessGroup, src: Optional[int]) -> Work:
    """An irecv's Work: source_rank() and received_bytes() once it completed."""
    # work._cwork: the engine's RecvWork, which knows the sender and the message's size
    work.source_rank = (lambda: src) if src is not None else \
        (lambda: g.ranks[work._cwork.source] if work.wait() else None)
    work.received_bytes = lambda: work._cwork.bytes if work.wait() else None
    return work


def _async_recv_work(issued, group, tensor, src, tag) -> Work:
    """_async_work for an irecv."""
    return _receiving(_async_work(issued, group, tensor), _group(group), src)


def _waited_recv(issued, group, tensor, src, tag) -> int:
    """_waited for a receive: the sender's global rank."""
    _waited(issued, group, tensor)
    return src if src is not None else _group(group).ranks[issued.source]


def _run(g: ProcessGroup, launch, args, keepalive, async_op: bool, finish=None, profiled: bool = False):
    """launch(*args, blocking) queues the call (`launch`: a method of g's communicator);
    blocking (not async_op) lets the engine run it on this thread when nothing is queued,
    which saves two thread hand-offs per small call.

    Under torch.profiler the call is a range named after the public function that called
    _run ("pycollect::all_reduce"): the issue and, when blocking, the wait."""
    if not profiled and _profiler_active():
        import torch

        with torch.autograd.profiler.record_function(f"pycollect::{sys._getframe(1).f_code.co_name}"):
            return _run(g, launch, args, keepalive, async_op, finish, profiled=True)
    if async_op:
        return g.submit(launch, args, keepalive, finish)
    g.run_blocking(launch, args, keepalive, finish)
    return None


def _input_output(g: ProcessGroup, call: str, inp, in_name: str, out, out_name: str, gathers: bool):
    """The buffers of a call that maps one tensor onto another of `g.size` times its size
    (all-gather: the output; reduce-scatter: the input), checked, and its device path."""
    i = as_buffer(inp, f"{call}({in_name})")
    o = as_buffer(out, f"{call}({out_name})", writable=True)
    check_same_dtype(i, o, f"{call}({out_name}, {in_name})")
    small, large, large_name = (i, o, out_name) if gathers else (o, i, in_name)
    check_numel(large, small.numel * g.size, f"{call}({large_name}) for {g.size} ranks x {small.numel}")
    return i, o, device_call(g, (i, o), call)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op: bool = False, algo=None, compress=None):
    """Reduce `tensor` across the group, in place, on every rank.

    `algo` (pc.Algo or its name: "auto", "ring", "direct", "halving_doubling", "tree",
    "hierarchical": docs/hierarchy.md) overrides the group's choice (PYCOLLECT_ALGO, default "auto": the algorithm the cost
    model predicts fastest for this size and group size, from a table the group builds
    once; `pycollect model --validate` shows its picks against measurement). All ranks must
    pass the same value (else every rank gets a MismatchError); an algorithm all_reduce
    does not have raises ValueError.

    `compress` ("bf16", "int8", pc.Compress; default None: exact) sends a float32 tensor's
    bytes compressed (docs/compression.md): bf16 halves them, int8 quarters them; the sums
    are float32 and every rank ends with the same bits, within the bound the page states.
    SUM and AVG only, algorithm "ring" (one host) or "hierarchical" (only the bytes
    between hosts compressed); any other dtype raises ValueError naming it.
    """
    g = _group(group)
    op = to_reduce_op(op)
    compress = Compress.parse(compress, "all_reduce(compress)")
    chosen = g.algo_for("all_reduce", algo)
    if compress and algo is None and chosen not in (Algo.RING, Algo.HIERARCHICAL):
        chosen = Algo.AUTO  # the group's default algorithm has no compressed form: the engine picks
    algo = chosen
    b = as_buffer(tensor, "all_reduce(tensor)", writable=True)
    dc = device_call(g, (b,), "all_reduce")
    if compress:
        if dc is not None:
            raise NotImplementedError("all_reduce(compress=...) runs on host (CPU) tensors only: the staged CUDA "
                                      "path has no encoder yet; all-reduce a CPU copy, or leave compress unset")
        launch = functools.partial(g._comm.all_reduce, compress=int(compress))
        return _run(g, launch, (b.address, b.numel, b.code, op, algo), (b,), async_op)
    if dc is not None:
        return _run(g, g._comm.all_reduce_staged, (b.address, b.numel, b.code, op, algo, *dc),
                    (b,), async_op)
    return _run(g, g._comm.all_reduce, (b.address, b.numel, b.code, op, algo), (b,), async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op: bool = False, algo=None):
    """output = concat of every rank's input, in rank order.

    `algo` (pc.Algo or its name: "auto", "ring", "bruck", "hierarchical") overrides the group's choice
    (PYCOLLECT_ALGO where it names an all-gather algorithm; "auto": the cost model's pick,
    as all_reduce's). All ranks must pass the same value.
    """
    g = _group(group)
    algo = g.algo_for("all_gather", algo, "all_gather_into_tensor")
    i, o, dc = _input_output(g, "all_gather_into_tensor", input_tensor, "input_tensor", output_tensor, "output_tensor",
                             gathers=True)
    if dc is not None:
        return _run(g, g._comm.all_gather_staged, (i.address, o.address, i.numel, i.code, algo, *dc),
                    (i, o), async_op)
    return _run(g, g._comm.all_gather, (i.address, o.address, i.numel, i.code, algo), (i, o),
                async_op)


def all_gather(tensor_list, tensor, group=None, async_op: bool = False, algo=None):
    """tensor_list[r] = rank r's `tensor` (list form); `algo` as all_gather_into_tensor's."""
    g = _group(group)
    algo = g.algo_for("all_gather", algo)
    check_list(tensor_list, g.size, "all_gather(tensor_list)")
    i = as_buffer(tensor, "all_gather(tensor)")
    outs = [as_buffer(t, f"all_gather(tensor_list[{k}])", writable=True) for k, t in enumerate(tensor_list)]
    for k, o in enumerate(outs):
        check_same_dtype(i, o, f"all_gather(tensor_list[{k}], tensor)")
        check_numel(o, i.numel, f"all_gather(tensor_list[{k}])")
    flat = empty_like_flat(tensor, i.numel * g.size)
    f = as_buffer(flat, "all_gather(staging)")
    dc = device_call(g, (i, *outs), "all_gather")

    def finish():
        for k, t in enumerate(tensor_list):
            g.copy_result(t, flat[k * i.numel:(k + 1) * i.numel])

    if dc is not None:
        return _run(g, g._comm.all_gather_staged, (i.address, f.address, i.numel, i.code, algo, *dc),
                    (i, f), async_op, finish)
    return _run(g, g._comm.all_gather, (i.address, f.address, i.numel, i.code, algo), (i, f),
                async_op, finish)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op: bool = False, algo=None):
    """output = chunk `rank` of the reduction of every rank's input.

    `algo` ("auto", "ring", "hierarchical") as all_reduce's: "auto" runs the hierarchy on
    groups that span hosts from the size the two-level model names (docs/hierarchy.md)."""
    g = _group(group)
    op = to_reduce_op(op)
    algo = g.algo_for("reduce_scatter", algo, "reduce_scatter_tensor")
    i, o, dc = _input_output(g, "reduce_scatter_tensor", input, "input", output, "output", gathers=False)
    if dc is not None:
        return _run(g, g._comm.reduce_scatter_staged, (i.address, o.address, o.numel, o.code, op, algo, *dc),
                    (i, o), async_op)
    return _run(g, g._comm.reduce_scatter, (i.address, o.address, o.numel, o.code, op, algo), (i, o), async_op)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op: bool = False, algo=None):
    """output = reduction over ranks of input_list[rank] (list form); `algo` as
    reduce_scatter_tensor's."""
    g = _group(group)
    op = to_reduce_op(op)
    algo = g.algo_for("reduce_scatter", algo)
    check_list(input_list, g.size, "reduce_scatter(input_list)")
    o = as_buffer(output, "reduce_scatter(output)", writable=True)
    ins = []
    for k, t in enumerate(input_list):
        b = as_buffer(t, f"reduce_scatter(input_list[{k}])")
        check_same_dtype(o, b, f"reduce_scatter(output, input_list[{k}])")
        check_numel(b, o.numel, f"reduce_scatter(input_list[{k}])")
        ins.append(b)
    dc = device_call(g, (o, *ins), "reduce_scatter")
    flat = concat_flat(input_list)
    i = as_buffer(flat, "reduce_scatter(staging)")
    if dc is not None:
        return _run(g, g._comm.reduce_scatter_staged, (i.address, o.address, o.numel, o.code, op, algo, *dc),
                    (i, o), async_op)
    return _run(g, g._comm.reduce_scatter, (i.address, o.address, o.numel, o.code, op, algo), (i, o), async_op)


def broadcast(tensor, src: int = 0, group=None, async_op: bool = False, algo=None):
    """Copy rank `src`'s tensor (a global rank) to every rank of the group. `algo`: "auto",
    "ring" (a chain along the ring) or "hierarchical" (across hosts, then within them)."""
    g = _group(group)
    root = g.group_rank(src, "broadcast(src)")
    algo = g.algo_for("broadcast", algo)
    b = as_buffer(tensor, "broadcast(tensor)", writable=True)
    dc = device_call(g, (b,), "broadcast")
    if dc is not None:
        return _run(g, g._comm.broadcast_staged, (b.address, b.numel, b.code, root, algo, *dc), (b,), async_op)
    return _run(g, g._comm.broadcast, (b.address, b.numel, b.code, root, algo), (b,), async_op)


def barrier(group=None, async_op: bool = False, device_ids=None, timeout=None):
    """Return once every rank of the group has entered the barrier. `timeout` (seconds or a
    timedelta) replaces the group's for this call; past it the barrier raises
    CollectiveTimeoutError and, as any engine timeout, fails the group."""
    g = _group(group)
    seconds = -1.0 if timeout is None else to_timedelta(timeout).total_seconds()
    return _run(g, g._comm.barrier, (seconds,), (), async_op)


def _check_tag(tag) -> int:
    if not isinstance(tag, int) or not -(2**31) <= tag < 2**31:
        raise ValueError(f"tag must be a 32-bit integer, got {tag!r}")
    return tag


def isend(tensor, dst: int, group=None, tag: int = 0) -> Work:
    return _send(tensor, dst, group, tag, async_op=True)


def _send(tensor, dst: int, group, tag: int, async_op: bool):
    g = _group(group)
    if needs_host_staging(g, [tensor], "send"):
        return _settled(through_host([tensor], [], lambda i, _o: isend(i[0], dst, group, tag)), async_op)
    peer = g.group_rank(dst, "send(dst)")
    b = as_buffer(tensor, "send(tensor)")
    tag = _check_tag(tag)
    return _run(g, g._comm.send, (b.address, b.numel, b.code, peer, tag), (b,), async_op)


def irecv(tensor, src: Optional[int] = None, group=None, tag: int = 0) -> Work:
    """Receive into `tensor` a message with `tag` from global rank `src`, or (src=None) from
    whichever rank's arrives first, as in Gloo and MPI: messages are matched by source and
    tag, in the order each sender sent them, whatever collectives or other messages come
    between. `tensor` may be larger than the message (its front is filled; the dtypes need
    not agree, the bytes are copied); a message larger than `tensor` is a MismatchError.
    Once the Work completed, source_rank() names the sender (a global rank) and
    received_bytes() the message's size."""
    return _recv(tensor, src, group, tag, async_op=True)


def _recv(tensor, src: Optional[int], group, tag: int, async_op: bool):
    g = _group(group)
    if needs_host_staging(g, [tensor], "recv"):
        work = through_host([], [tensor], lambda _i, o: irecv(o[0], src, group, tag))
        return _settled(work, async_op, work.source_rank)
    b = as_buffer(tensor, "recv(tensor)", writable=True)
    tag = _check_tag(tag)
    if src is None and g.size == 1:
        raise ValueError("recv(src=None): the group has no other rank to receive from")
    peer = _C.ANY_SOURCE if src is None else g.group_rank(src, "recv(src)")
    if async_op:
        return _receiving(_run(g, g._comm.recv, (b.address, b.numel, b.code, peer, tag), (b,), True), g, src)
    if src is not None:
        _run(g, g._comm.recv, (b.address, b.numel, b.code, peer, tag), (b,), False)
        return src
    received = []  # from any source the engine's Work comes back, done: whoever's message matched

    def launch(*args):
        received.append(g._comm.recv(*args))
        return received[0]

    _run(g, launch, (b.address, b.numel, b.code, peer, tag), (b,), False)
    return g.ranks[received[0].source]


def _settled(work, async_op: bool, result=lambda: None):
    """An async call's Work; for a blocking call, `result()` once the Work completed."""
    if async_op:
        return work
    work.wait()
    return result()


def send(tensor, dst: int, group=None, tag: int = 0) -> None:
    """Send `tensor` to global rank `dst` (completes once the bytes left this process)."""
    _send(tensor, dst, group, tag, async_op=False)


def recv(tensor, src: Optional[int] = None, group=None, tag: int = 0) -> int:
    """Receive into `tensor` a message with `tag` from global rank `src` (None: any rank), as
    irecv matches it; returns the sender."""
    return _recv(tensor, src, group, tag, async_op=False)


def reduce(tensor, dst: int = 0, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce every rank's `tensor` into global rank `dst`'s, in place; the other ranks'
    tensors are left as they were (a pipelined chain towards `dst`)."""
    g = _group(group)
    root = g.group_rank(dst, "reduce(dst)")
    op = to_reduce_op(op)
    b = as_buffer(tensor, "reduce(tensor)", writable=True)
    dc = device_call(g, (b,), "reduce")
    if dc is not None:
        return _run(g, lambda *args: g._comm.reduce_staged(*args[:-1]),  # it has no `blocking`
                    (b.address, b.numel, b.code, op, root, *dc), (b,),
                    async_op)
    return _run(g, g._comm.reduce, (b.address, b.numel, b.code, op, root), (b,), async_op)


def _root_list(items, is_root: bool, size: int, what: str, root_what: str):
    """A gather/scatter list: `size` tensors on the root, None or empty elsewhere."""
    if not is_root:
        if items:
            raise ValueError(f"{what} must not be given on ranks other than {root_what}")
        return []
    if items is None:
        raise ValueError(f"{what} is required on {root_what}")
    check_list(items, size, what)
    return list(items)


def gather(tensor, gather_list=None, dst: int = 0, group=None, async_op: bool = False):
    """gather_list[r] on global rank `dst` = rank r's `tensor`. Sizes may differ by rank
    (gather_list[r] must match rank r's tensor); other ranks pass no list."""
    g = _group(group)
    if needs_host_staging(g, [tensor, *(gather_list or [])], "gather"):
        return through_host([tensor], list(gather_list or []),
                            lambda i, o: gather(i[0], o or None, dst, group, async_op))
    root = g.group_rank(dst, "gather(dst)")
    i = as_buffer(tensor, "gather(tensor)")
    items = _root_list(gather_list, g.rank == root, g.size, "gather(gather_list)", f"the destination rank {dst}")
    outs = [as_buffer(t, f"gather(gather_list[{k}])", writable=True) for k, t in enumerate(items)]
    for k, o in enumerate(outs):
        check_same_dtype(i, o, f"gather(gather_list[{k}], tensor)")
    if outs:
        check_numel(outs[root], i.numel, f"gather(gather_list[{root}]) (the destination's own slot)")
    spans = [(o.address, o.numel) for o in outs]
    return _run(g, g._comm.gather, (i.address, i.numel, spans, i.code, root), (i, *outs), async_op)


def scatter(tensor, scatter_list=None, src: int = 0, group=None, async_op: bool = False):
    """Rank r's `tensor` = scatter_list[r] of global rank `src`. Sizes may differ by rank
    (each rank's tensor must match its entry); other ranks pass no list."""
    g = _group(group)
    if needs_host_staging(g, [tensor, *(scatter_list or [])], "scatter"):
        return through_host(list(scatter_list or []), [tensor],
                            lambda i, o: scatter(o[0], i or None, src, group, async_op))
    root = g.group_rank(src, "scatter(src)")
    o = as_buffer(tensor, "scatter(tensor)", writable=True)
    items = _root_list(scatter_list, g.rank == root, g.size, "scatter(scatter_list)", f"the source rank {src}")
    ins = [as_buffer(t, f"scatter(scatter_list[{k}])") for k, t in enumerate(items)]
    for k, b in enumerate(ins):
        check_same_dtype(o, b, f"scatter(tensor, scatter_list[{k}])")
    if ins:
        check_numel(ins[root], o.numel, f"scatter(scatter_list[{root}]) (the source's own slot)")
    spans = [(b.address, b.numel) for b in ins]
    return _run(g, g._comm.scatter, (spans, o.address, o.numel, o.code, root), (o, *ins), async_op)


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op: bool = False):
    """Rank r sends input_tensor_list[p] to rank p and receives rank p's
    input_tensor_list[r] into output_tensor_list[p]; sizes may differ by pair (a pair
    that disagrees gets a MismatchError)."""
    g = _group(group)
    check_list(output_tensor_list, g.size, "all_to_all(output_tensor_list)")
    check_list(input_tensor_list, g.size, "all_to_all(input_tensor_list)")
    if needs_host_staging(g, [*output_tensor_list, *input_tensor_list], "all_to_all"):
        return through_host(list(input_tensor_list), list(output_tensor_list),
                            lambda i, o: all_to_all(o, i, group, async_op))
    outs = [as_buffer(t, f"all_to_all(output_tensor_list[{k}])", writable=True)
            for k, t in enumerate(output_tensor_list)]
    ins = [as_buffer(t, f"all_to_all(input_tensor_list[{k}])") for k, t in enumerate(input_tensor_list)]
    for k, b in enumerate(outs[1:] + ins, start=1):
        check_same_dtype(outs[0], b, "all_to_all(output_tensor_list, input_tensor_list)")
    check_numel(outs[g.rank], ins[g.rank].numel, f"all_to_all(output_tensor_list[{g.rank}]) (this rank's own)")
    i_spans = [(b.address, b.numel) for b in ins]
    o_spans = [(b.address, b.numel) for b in outs]
    return _run(g, g._comm.all_to_all, (i_spans, o_spans, outs[0].code), (*ins, *outs), async_op)


def _same_dtype_list(tensors, what: str, writable: bool):
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ValueError(f"{what}: expected a non-empty list of tensors")
    bufs = [as_buffer(t, f"{what}[{k}]", writable=writable) for k, t in enumerate(tensors)]
    for k, b in enumerate(bufs[1:], start=1):
        check_same_dtype(bufs[0], b, f"{what}[0] and [{k}]")
    return bufs


def all_reduce_coalesced(tensors, op=ReduceOp.SUM, group=None, async_op: bool = False, algo=None):
    """all_reduce of every tensor of `tensors` (one dtype), in one engine call: one header
    and one pass over the links for the packed tensors."""
    g = _group(group)
    op = to_reduce_op(op)
    algo = g.algo_for("all_reduce", algo, "all_reduce_coalesced")
    if isinstance(tensors, (list, tuple)) and needs_host_staging(g, tensors, "all_reduce_coalesced"):
        return through_host(list(tensors), list(tensors),
                            lambda _i, o: all_reduce_coalesced(o, op, group, async_op, algo))
    bufs = _same_dtype_list(tensors, "all_reduce_coalesced(tensors)", writable=True)
    spans = [(b.address, b.numel) for b in bufs]
    return _run(g, g._comm.all_reduce_coalesced, (spans, bufs[0].code, op, algo), bufs, async_op)


def all_gather_coalesced(output_tensor_lists, input_tensor_list, group=None, async_op: bool = False, algo=None):
    """output_tensor_lists[r][i] = rank r's input_tensor_list[i], in one engine call; `algo`
    as all_gather_into_tensor's, chosen by the packed size."""
    g = _group(group)
    algo = g.algo_for("all_gather", algo, "all_gather_coalesced")
    if (isinstance(input_tensor_list, (list, tuple)) and isinstance(output_tensor_lists, (list, tuple))
            and needs_host_staging(g, [*input_tensor_list, *(t for row in output_tensor_lists for t in row)],
                                   "all_gather_coalesced")):
        rows = [len(row) for row in output_tensor_lists]
        flat_out = [t for row in output_tensor_lists for t in row]

        def run(i, o):
            it = iter(o)
            return all_gather_coalesced([[next(it) for _ in range(k)] for k in rows], i, group, async_op, algo)

        return through_host(list(input_tensor_list), flat_out, run)
    ins = _same_dtype_list(input_tensor_list, "all_gather_coalesced(input_tensor_list)", writable=False)
    check_list(output_tensor_lists, g.size, "all_gather_coalesced(output_tensor_lists)")
    outs = []
    for r, row in enumerate(output_tensor_lists):
        check_list(row, len(ins), f"all_gather_coalesced(output_tensor_lists[{r}])")
        for k, t in enumerate(row):
            o = as_buffer(t, f"all_gather_coalesced(output_tensor_lists[{r}][{k}])", writable=True)
            check_same_dtype(ins[k], o, f"all_gather_coalesced(output_tensor_lists[{r}][{k}])")
            check_numel(o, ins[k].numel, f"all_gather_coalesced(output_tensor_lists[{r}][{k}])")
            outs.append(o)
    i_spans = [(b.address, b.numel) for b in ins]
    o_spans = [(b.address, b.numel) for b in outs]
    return _run(g, g._comm.all_gather_coalesced, (i_spans, o_spans, ins[0].code, algo), (*ins, *outs),
                async_op)


def _row_split(x, splits, n: int, what: str):
    """Element offsets and counts of the n chunks of `x` along its first dimension."""
    shape = tuple(x.shape)
    rows = shape[0] if shape else 1
    per_row = (x.numel() if is_torch_tensor(x) else x.size) // rows if rows else 0
    if splits is None or len(splits) == 0:
        if rows % n:
            raise ValueError(f"all_to_all_single({what}): first dimension {rows} is not divisible by the "
                             f"{n} ranks; pass {what}_split_sizes")
        splits = [rows // n] * n
    splits = [int(k) for k in splits]
    if len(splits) != n or any(k < 0 for k in splits) or sum(splits) != rows:
        raise ValueError(f"all_to_all_single({what}_split_sizes={splits}): need {n} non-negative sizes "
                         f"summing to the first dimension {rows}")
    offsets = [sum(splits[:k]) * per_row for k in range(n)]
    return offsets, [k * per_row for k in splits], per_row


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                      async_op: bool = False):
    """Rank r sends chunk p of `input` to rank p and receives rank p's chunk r into chunk p
    of `output`; chunks split the first dimension (evenly, or by the split sizes).

    One engine all-to-all over the chunks, as the list form (all_to_all): every pair's
    message in flight at once. Ranks that disagree on a chunk's size get a MismatchError
    from the receiving side.
    """
    g = _group(group)
    if needs_host_staging(g, [output, input], "all_to_all_single"):
        return through_host([input], [output], lambda i, o: all_to_all_single(
            o[0], i[0], output_split_sizes, input_split_sizes, group, async_op))
    n, r = g.size, g.rank
    i = as_buffer(input, "all_to_all_single(input)")
    o = as_buffer(output, "all_to_all_single(output)", writable=True)
    check_same_dtype(i, o, "all_to_all_single(output, input)")
    in_off, in_len, in_row = _row_split(input, input_split_sizes, n, "input")
    out_off, out_len, out_row = _row_split(output, output_split_sizes, n, "output")
    if in_row != out_row and in_len != [0] * n and out_len != [0] * n:
        raise ValueError(f"all_to_all_single: a row of input has {in_row} elements, of output {out_row}")
    if in_len[r] != out_len[r]:
        raise ValueError(f"all_to_all_single: rank {r} sends itself {in_len[r]} elements but expects "
                         f"{out_len[r]}")
    es = DTYPE_SIZES[i.dtype]
    i_spans = [(i.address + in_off[p] * es, in_len[p]) for p in range(n)]
    o_spans = [(o.address + out_off[p] * es, out_len[p]) for p in range(n)]
    return _run(g, g._comm.all_to_all, (i_spans, o_spans, i.code), (i, o), async_op)


@contextlib.contextmanager
def tracing(group=None) -> Iterator[ProcessGroup]:
    """Record the engine's events (docs/traces.md) for every call issued on the group inside
    the block; take_trace() hands them over. Every rank must trace the same calls for the
    sends of one to meet the receives of the other in a picture. PYCOLLECT_TRACE=1 traces
    every call."""
    g = _group(group)
    before = g.set_tracing(True)
    try:
        yield g
    finally:
        g.set_tracing(before)


def take_trace(group=None) -> List[TraceEvent]:
    """This rank's recorded events for the group, oldest first (pc.TraceEvent); the buffer
    is emptied. Events of calls still running may be missing: wait for them first."""
    return _group(group).take_trace()


def get_counters(group=None) -> dict:
    """Calls per collective kind that ran through this group's engine."""
    return _group(group).counters()


def get_flight_record(group=None) -> List[dict]:
    """This rank's last calls in the group (its flight recorder's ring,
    PYCOLLECT_FLIGHT_ENTRIES of them), oldest first, each a dict: id, seq, op, dtype, algo
    (the algorithm the engine ran: "shm" for the shared arena), root, count, peer, state,
    phase, step, steps, waiting_on and its issued, started and ended times (us)."""
    return _group(group).flight_record()


def get_transport_info(group=None) -> dict:
    """{peer's global rank: "shm" or "tcp"}: what carries each of this rank's links in the
    group (PYCOLLECT_TRANSPORT; shared memory to ranks on this host under "auto"), for the
    links made so far: a link is made when a call first needs it (PYCOLLECT_LINKS)."""
    return _group(group).transport_info()


def get_topology(group=None) -> Topology:
    """Which of the group's ranks share a host (pycollect.topology.Topology): learned when the
    group formed, by the test the shared-memory upgrade makes (PYCOLLECT_HOST_TAG counts)."""
    return _group(group).topology


def get_bytes_sent(group=None) -> int:
    """Bytes this rank has put on its links for the group (payload and headers) or into the
    group's shared arena for its peers (the shared-memory collectives), as counted by the
    engine when each operation finished."""
    return _group(group).bytes_sent()


# The public functions that have a fast call: name -> (FastFront's method, the parameters it
# takes in its order, the parameters that must be None or False for it).
_FAST_CALLS = {
    "all_reduce": ("all_reduce", ("group", "tensor", "op", "algo"), ("async_op", "compress")),
    "all_gather_into_tensor": ("all_gather", ("group", "output_tensor", "input_tensor", "algo"), ("async_op",)),
    "reduce_scatter_tensor": ("reduce_scatter", ("group", "output", "input", "op", "algo"), ("async_op",)),
    "all_gather": ("all_gather_list", ("group", "tensor_list", "tensor", "algo"), ("async_op",)),
    "reduce_scatter": ("reduce_scatter_list", ("group", "output", "input_list", "op", "algo"), ("async_op",)),
    "all_reduce_coalesced": ("all_reduce_coalesced", ("group", "tensors", "op"), ("async_op", "algo")),
    "all_gather_coalesced": ("all_gather_coalesced", ("group", "output_tensor_lists", "input_tensor_list"),
                             ("async_op", "algo")),
    "broadcast": ("broadcast", ("group", "tensor", "src", "algo"), ("async_op",)),
    "barrier": ("barrier", ("group",), ("async_op", "device_ids", "timeout")),
    "reduce": ("reduce", ("group", "tensor", "dst", "op"), ("async_op",)),
    "gather": ("gather", ("group", "tensor", "gather_list", "dst"), ("async_op",)),
    "scatter": ("scatter", ("group", "tensor", "scatter_list", "src"), ("async_op",)),
    "all_to_all": ("all_to_all", ("group", "output_tensor_list", "input_tensor_list"), ("async_op",)),
    "all_to_all_single": ("all_to_all_single", ("group", "output", "input", "output_split_sizes", "input_split_sizes"),
                          ("async_op",)),
    "send": ("send", ("group", "tensor", "dst", "tag"), ()),
    "recv": ("recv", ("group", "tensor", "src", "tag"), ()),
    # off None: every call queued (the API's Work of it returned)
    "isend": ("send", ("group", "tensor", "dst", "tag"), None),
    "irecv": ("recv", ("group", "tensor", "src", "tag"), None),
}


def _fast_entries(front, functions) -> dict:
    """Each function of _FAST_CALLS (`functions[name]`: its general path) as a C entry on
    `front` (csrc/bindings/register_fast_entry.cc): a call whose `off` parameters are None or
    False (async_op True too: the call queued, as every isend and irecv) goes to front's
    method without a Python frame, and what it declines runs the function. Each keeps its
    function's name, docstring and signature (__wrapped__)."""
    entries = {}
    for name, (method, fast, off) in _FAST_CALLS.items():
        receives = name == "recv"  # returns its src, or the sender's rank
        # async_op=True (or every call: isend, irecv) queued by the fast call, its Work made here
        async_param = "async_op" if off and "async_op" in off else None
        queues = off is None or async_param is not None
        work_of = _async_recv_work if name == "irecv" else _async_work
        entry = _C.fast_entry(functions[name], getattr(front, method), _waited_recv if receives else _waited,
                              fast, off or (), "src" if receives else None, async_param,
                              work_of if queues else None)
        entries[name] = functools.update_wrapper(entry, functions[name])
    return entries


globals().update(_fast_entries(_fast, globals()))  # all_reduce, broadcast, ...: the C entries
# torch 2.13's names (it deprecates all_gather_into_tensor and reduce_scatter_tensor for them).
all_gather_single = all_gather_into_tensor
reduce_scatter_single = reduce_scatter_tensor
