"""Tests for pycollect.torch_backend: "pycollect" as a torch.distributed backend.

The session's 3-rank pool (conftest.py: Gloo default group + pycollect). Each case builds
torch groups on both backends (3 ranks, and 2 ranks as a sub-group {0, 1}) and
compares: every dist.* collective against Gloo across dtypes, ops and sizes (with the
engine's counters proving each call ran on pycollect), the core issue's cross-check
cases (tests/collective_cases.py) routed through dist.*, torch DDP and torch FSDP2
(fully_shard per block + root) trained side by side, Work futures and timeouts, and
the errors of calls the engine cannot do. One extra 2-rank pool makes "pycollect"
the *default* group through the env:// route torchrun uses.
"""
from __future__ import annotations

import datetime
import os
import threading
import time
from collections import Counter

import pytest
import torch
import torch.distributed as dist
from rank_pool import RankPool

from pycollect.launch import free_port

import pycollect as pc
import pycollect.torch_backend as tb
from pycollect import api

WORLD = 3
R = dist.ReduceOp
_GROUPS: dict = {}




# -- worker side ---------------------------------------------------------------------


def _groups() -> dict:
    """(backend, size) -> torch group; created once per worker, in the same order everywhere."""
    if not _GROUPS:
        tb.register()
        tb.register()  # idempotent
        td = datetime.timedelta(seconds=60)
        for size in (WORLD, 2):
            ranks = list(range(size))
            for backend in ("pycollect", "gloo"):
                _GROUPS[backend, size] = dist.new_group(ranks, backend=backend, timeout=td)
    return _GROUPS


def _pair(size):
    """(pycollect group, gloo group), or None on a rank outside the sub-group."""
    g = _groups()
    if dist.get_rank() >= size:
        return None
    return g["pycollect", size], g["gloo", size]


def _calls(pg) -> Counter:
    """Calls per kind that ran on the engine group behind torch group `pg` so far."""
    return Counter(tb.engine_group(pg).counters())


def _data(numel, dtype, rank, salt):
    gen = torch.Generator().manual_seed(7919 * salt + rank)
    if dtype.is_floating_point:
        return torch.randn(numel, generator=gen).to(dtype)
    return torch.randint(1, 3, (numel,), generator=gen).to(dtype)  # small: PRODUCT must not overflow


def _tol(dtype):
    if not dtype.is_floating_point:
        return dict(rtol=0, atol=0)
    return {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float64: dict(rtol=1e-12, atol=1e-12),
            torch.bfloat16: dict(rtol=1.6e-2, atol=2e-2)}[dtype]


def case_registration():
    pg, gloo = _pair(WORLD)
    c10d = dist.distributed_c10d
    return dict(
        in_list="pycollect" in dist.Backend.backend_list,
        backend=dist.get_backend(pg), name_backend=pg.name(),
        name_native=pg._get_backend(torch.device("cpu")).name(),
        resolves=c10d._resolve_process_group(pg.group_name) is pg,
        cpu_default=dist.Backend.default_device_backend_map["cpu"],
        engine_size=tb.engine_group(pg).size,
        not_ours=_raises(lambda: tb.engine_group(gloo), TypeError),
    )


def _raises(fn, kind):
    try:
        fn()
    except kind as e:
        return str(e)
    return None


def case_cross_check(size):
    """Every dist.* collective on pycollect and on Gloo, same inputs; returns
    (mismatches, engine counter delta, expected delta, results for the bitwise check)."""
    pair = _pair(size)
    if pair is None:
        return None
    pg, gloo = pair
    me, n = pg.rank(), pg.size()
    before = _calls(pg)
    expected, bad, keep = Counter(), [], {}
    salt = 0

    def check(key, ours, ref, dtype):
        try:
            torch.testing.assert_close(ours, ref, **_tol(dtype), equal_nan=False)
        except AssertionError as e:
            bad.append(f"rank {me} {key}: {str(e).splitlines()[0]}")

    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.int64, torch.uint8):
        fp = dtype.is_floating_point
        ops = [("SUM", R.SUM), ("PRODUCT", R.PRODUCT), ("MIN", R.MIN), ("MAX", R.MAX)]
        if fp:
            ops += [("AVG", R.AVG), ("PREMUL", R.PREMUL_SUM(0.375)), ("NCCL_PREMUL", dist._make_nccl_premul_sum(2.0))]
        for numel in (0, 1, 7, 1000):
            for name, op in ops:
                salt += 1
                x = _data(numel, dtype, me, salt)
                ref = x.clone()
                if name.endswith("PREMUL"):
                    ref = torch.mul(ref, op.factor).to(dtype)
                dist.all_reduce(ref, op=R.SUM if name.endswith("PREMUL") else op, group=gloo)
                dist.all_reduce(x, op=op, group=pg)
                expected["all_reduce"] += 1
                check(f"all_reduce {name} {dtype} n={numel}", x, ref, dtype)
                keep[f"all_reduce {name} {dtype} {numel}"] = x
                # reduce-scatter, single tensor and list forms
                salt += 1
                x = _data(numel * n, dtype, me, salt)
                ours, ref = torch.empty(numel, dtype=dtype), torch.empty(numel, dtype=dtype)
                gin = torch.mul(x, op.factor).to(dtype) if name.endswith("PREMUL") else x
                dist.reduce_scatter_single(ref, gin, op=R.SUM if name.endswith("PREMUL") else op, group=gloo)
                dist.reduce_scatter_single(ours, x, op=op, group=pg)
                check(f"reduce_scatter_single {name} {dtype} n={numel}", ours, ref, dtype)
                ours2 = torch.empty(numel, dtype=dtype)
                dist.reduce_scatter(ours2, list(x.chunk(n)) if numel else [x[:0]] * n, op=op, group=pg)
                check(f"reduce_scatter(list) {name} {dtype} n={numel}", ours2, ref, dtype)
                expected["reduce_scatter"] += 2
            # all-gather (single, list), broadcast from the last rank, coalesced all-reduce
            salt += 1
            x = _data(numel, dtype, me, salt)
            ours, ref = torch.empty(numel * n, dtype=dtype), torch.empty(numel * n, dtype=dtype)
            dist.all_gather_single(ref, x, group=gloo)
            dist.all_gather_single(ours, x, group=pg)
            check(f"all_gather_single {dtype} n={numel}", ours, ref, dtype)
            outs = [torch.empty(numel, dtype=dtype) for _ in range(n)]
            dist.all_gather(outs, x, group=pg)
            check(f"all_gather(list) {dtype} n={numel}", torch.cat(outs), ref, dtype)
            keep[f"all_gather {dtype} {numel}"] = ours
            b = x.clone()
            dist.broadcast(b, group=pg, group_src=n - 1)
            check(f"broadcast {dtype} n={numel}", b, _data(numel, dtype, n - 1, salt), dtype)
            pair_in = [x.clone(), x[: numel // 2].clone()]
            pair_ref = [t.clone() for t in pair_in]
            dist.all_reduce_coalesced(pair_in, group=pg)
            for t in pair_ref:
                dist.all_reduce(t, group=gloo)
            check(f"all_reduce_coalesced {dtype} n={numel}", torch.cat(pair_in), torch.cat(pair_ref), dtype)
            expected.update({"all_gather": 2, "broadcast": 1, "all_reduce_coalesced": 1})  # one call for the pair
            # send/recv along the ring (rank 0 sends first, so no cycle of blocked sends)
            got = torch.empty(numel, dtype=dtype)
            nxt, prv = (me + 1) % n, (me - 1) % n
            if me == 0:
                dist.send(x, group=pg, group_dst=nxt, tag=5)
                dist.recv(got, group=pg, group_src=prv, tag=5)
            else:
                dist.recv(got, group=pg, group_src=prv, tag=5)
                dist.send(x, group=pg, group_dst=nxt, tag=5)
            check(f"send/recv {dtype} n={numel}", got, _data(numel, dtype, prv, salt), dtype)
            expected["send/recv"] += 2
    dist.barrier(group=pg)
    expected["barrier"] += 1
    delta = _calls(pg) - before
    return bad, dict(delta), dict(expected), keep


class _ViaBackend:
    """Stands in for `pycollect` inside tests/collective_cases.py: its pc.* calls go
    through dist.* on the torch group of the pycollect backend instead."""

    NON_GROUP_MEMBER = pc.NON_GROUP_MEMBER
    ReduceOp = pc.ReduceOp

    @staticmethod
    def get_rank(group):
        return group.rank()

    @staticmethod
    def all_reduce(t, op, group):
        dist.all_reduce(t, op=getattr(R, op.name), group=group)

    @staticmethod
    def broadcast(t, src, group):
        dist.broadcast(t, group=group, group_src=src)

    @staticmethod
    def all_gather_into_tensor(out, t, group):
        dist.all_gather_single(out, t, group=group)

    @staticmethod
    def all_gather(parts, t, group):
        dist.all_gather(parts, t, group=group)

    @staticmethod
    def reduce_scatter_tensor(out, t, op, group):
        dist.reduce_scatter_single(out, t, op=getattr(R, op.name), group=group)

    @staticmethod
    def reduce_scatter(out, parts, op, group):
        dist.reduce_scatter(out, parts, op=getattr(R, op.name), group=group)


def case_core_suite(kind, size):
    """The core issue's cross-check cases (numpy reference + Gloo) run through this backend."""
    import collective_cases as cc

    pair = _pair(size)
    if pair is None:
        return None
    pg = pair[0]
    before = _calls(pg)
    out = cc.run_cases(kind, pair, size, 3, counts=[0, 1, 13, 4099], comm=_ViaBackend)
    return out, dict(_calls(pg) - before)


class _Net(torch.nn.Module):
    def __init__(self, width=16, blocks=3):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh()) for _ in range(blocks))
        self.head = torch.nn.Linear(width, 3)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _batch(step, rank):
    gen = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(8, 16, generator=gen), torch.randn(8, 3, generator=gen)


def case_ddp(size, steps=5):
    """Train torch DDP on each backend from the same start; return params and counter delta."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    pair = _pair(size)
    if pair is None:
        return None
    pg, _ = pair
    before = _calls(pg)
    params = {}
    for name, group in zip(("pycollect", "gloo"), pair):
        torch.manual_seed(0)
        model = DDP(_Net(), process_group=group, bucket_cap_mb=0.002)  # several buckets
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for step in range(steps):
            x, y = _batch(step, group.rank())
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        params[name] = [p.detach().clone() for p in model.parameters()]
    delta = _calls(pg) - before
    return params, dict(delta)


def case_fsdp(size, divide_factor=None, steps=4):
    """Train torch FSDP2 (fully_shard per block + root) on each backend; return losses.

    With a divide factor that is not the group size FSDP2 reduce-scatters with
    PREMUL_SUM(1/factor); Gloo has no PREMUL_SUM, so its run sums and divides after.
    """
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard

    pair = _pair(size)
    if pair is None:
        return None
    pg, gloo = pair
    meshes = {"gloo": DeviceMesh.from_group(gloo, "cpu")}
    if size == WORLD:  # the whole world: init_device_mesh builds the pycollect group itself
        meshes["pycollect"] = init_device_mesh("cpu", (WORLD,), backend_override={0: "pycollect"})
    else:
        meshes["pycollect"] = DeviceMesh.from_group(pg, "cpu")
    ours = meshes["pycollect"].get_group()
    ops = []
    spy = dist.reduce_scatter_single  # FSDP2 reduce-scatters its gradients through it (keywords)

    def recorded(*args, **kwargs):
        if kwargs.get("group") is ours:
            op = kwargs.get("op", dist.ReduceOp.SUM)
            ops.append(getattr(op, "op", op).name)
        return spy(*args, **kwargs)

    dist.reduce_scatter_single = recorded
    before = _calls(ours)
    losses = {}
    for name in ("pycollect", "gloo"):
        torch.manual_seed(0)
        model = _Net()
        for block in model.blocks:
            fully_shard(block, mesh=meshes[name])
        fully_shard(model, mesh=meshes[name])
        if divide_factor is not None:
            for module in (*model.blocks, model):  # each fully_shard'ed module has its own setting
                module.set_gradient_divide_factor(divide_factor)
                module.set_force_sum_reduction_for_comms(name == "gloo")
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses[name] = []
        for step in range(steps):
            x, y = _batch(0, meshes[name].get_local_rank())  # one batch: the loss must fall
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    dist.reduce_scatter_single = spy
    delta = _calls(ours) - before
    return losses, dict(delta), sorted(set(ops)), tb.is_backend(ours)


def case_work_semantics():
    """Futures, wait(timeout) on a recv whose sender is late, and the GIL while waiting."""
    pair = _pair(2)
    if pair is None:
        return None
    pg, gloo = pair
    me = pg.rank()
    before = _calls(pg)
    out = {}
    t = torch.full((4,), float(me + 1))
    fut = dist.all_reduce(t, group=pg, async_op=True).get_future().then(lambda f: f.value()[0] * 10)
    out["then"] = fut.wait().tolist()
    buf = torch.zeros(1000)
    if me == 0:
        work = dist.irecv(buf, group=pg, group_src=1)
        out["timeout"] = _raises(lambda: work.wait(timeout=datetime.timedelta(seconds=0.3)), dist.DistBackendError)
        out["done_after_timeout"] = work.is_completed()
        ticks, done = 0, threading.Event()
        waiter = threading.Thread(target=lambda: (work.wait(), done.set()))
        waiter.start()
        while not done.is_set():  # Python keeps running while another thread waits on the engine
            ticks += 1
        waiter.join()
        out["ticks_while_waiting"] = ticks
        out["received"] = bool(torch.equal(buf, torch.arange(1000.0)))
        out["success"] = work.is_success()
    else:
        time.sleep(1.0)
        dist.send(torch.arange(1000.0), group=pg, group_dst=0)
    out["engine"] = dict(_calls(pg) - before)
    # A Future first asked for after its call ended (pycollect makes it then): done, with the
    # result, and chaining on it runs at once; as Gloo's.
    out["late_future"] = {}
    for name, g in (("pycollect", pg), ("gloo", gloo)):
        x = torch.full((3,), float(me + 1))
        work = dist.all_reduce(x, group=g, async_op=True)
        work.wait()
        late = work.get_future()
        out["late_future"][name] = (late.done(), late.value()[0].tolist(),
                                    late.then(lambda f: f.value()[0] * 2).wait().tolist())
    return out


def case_async_returns_at_once(nbytes: int):
    """torch's contract: an async_op=True collective returns a Work at once, whatever the other
    ranks do. Rank 1 joins 1 s late; rank 0 times the return of an async all-reduce, broadcast,
    all-gather and reduce-scatter of `nbytes` a rank, on pycollect and on Gloo, then waits for
    them: {backend: {call: seconds to return}}, and whether every result was right."""
    pair = _pair(2)
    if pair is None:
        return None
    out = {}
    for backend, g in zip(("pycollect", "gloo"), pair):
        me, n = g.rank(), max(2, nbytes // 4) // 2 * 2
        if me == 1:
            time.sleep(1.0)
        x, y, b = torch.full((n,), float(me + 1)), torch.full((n,), float(me + 1)), torch.full((n,), float(me + 5))
        gathered, shard = torch.empty(2 * n), torch.empty(n // 2)
        calls = {"all_reduce": lambda: dist.all_reduce(x, group=g, async_op=True),
                 "broadcast": lambda: dist.broadcast(b, group=g, group_src=0, async_op=True),
                 "all_gather": lambda: dist.all_gather_into_tensor(gathered, y, group=g, async_op=True),
                 "reduce_scatter": lambda: dist.reduce_scatter_tensor(shard, torch.ones(n), group=g, async_op=True)}
        returned, works = {}, []
        for name, call in calls.items():
            t0 = time.monotonic()
            works.append(call())
            returned[name] = time.monotonic() - t0
        for w in works:
            w.wait()
        right = (x.tolist() == [3.0] * n and b.tolist() == [5.0] * n and gathered.tolist() == [1.0] * n + [2.0] * n
                 and shard.tolist() == [2.0] * (n // 2))
        out[backend] = (returned, right)
        dist.barrier(group=g)
    return out


_SCHEDULE_GROUPS: dict = {}


def _schedule_groups(backend: str):
    """Data-parallel groups {0, 2} and {1, 3}, pipeline pairs {0, 1} and {2, 3}, on `backend`
    (short timeouts: a deadlock fails in seconds). Made once per worker, on every rank."""
    if not _SCHEDULE_GROUPS:
        tb.register()
        td = datetime.timedelta(seconds=10)
        for b in ("pycollect", "gloo"):
            _SCHEDULE_GROUPS[b] = {kind: [dist.new_group(ranks, backend=b, timeout=td) for ranks in pairs]
                                   for kind, pairs in (("dp", ([0, 2], [1, 3])), ("pp", ([0, 1], [2, 3])))}
    return _SCHEDULE_GROUPS[backend]


def _pipeline_step(mode: str, sending: bool, tensor, peer: int, group) -> None:
    """A send (or receive) to `peer`, done before returning: blocking ("send"), isend/irecv
    and wait ("isend"), or a batch_isend_irecv of one ("batch")."""
    if mode == "send":
        (dist.send if sending else dist.recv)(tensor, peer, group=group)
    elif mode == "isend":
        (dist.isend if sending else dist.irecv)(tensor, peer, group=group).wait()
    else:
        for w in dist.batch_isend_irecv([dist.P2POp(dist.isend if sending else dist.irecv, tensor, peer, group=group)]):
            w.wait()


def case_cross_group_schedule(backend: str, nbytes: int, mode: str):
    """The schedule DDP with pipelining makes: ranks 0 and 3 issue an async all-reduce on their
    data-parallel group, then send to their pipeline peer (1 and 2), who receive first and
    all-reduce after. `mode`: blocking send/recv, isend/irecv, or batch_isend_irecv. Returns
    (seconds, the all-reduce's value, what was received or None)."""
    groups = _schedule_groups(backend)
    rank = dist.get_rank()
    dp, pp = groups["dp"][rank % 2], groups["pp"][rank // 2]
    peer = {0: 1, 1: 0, 2: 3, 3: 2}[rank]
    n = max(1, nbytes // 4)
    x = torch.full((n,), float(rank + 1))
    got = None
    dist.barrier()
    t0 = time.monotonic()
    if rank in (0, 3):
        w = dist.all_reduce(x, group=dp, async_op=True)
        _pipeline_step(mode, True, torch.full((n,), 10.0 + rank), peer, pp)
        w.wait()
    else:
        got = torch.empty(n)
        _pipeline_step(mode, False, got, peer, pp)
        dist.all_reduce(x, group=dp)
    took = time.monotonic() - t0
    ok_x = x.eq(x[0]).all().item() and (got is None or got.eq(got[0]).all().item())
    return took, x[0].item() if ok_x else None, None if got is None else (got[0].item() if ok_x else None)


def case_all_to_all(size):
    """dist.all_to_all_single on the pycollect group against Gloo, even and uneven splits."""
    pair = _pair(size)
    if pair is None:
        return None
    pg, gg = pair
    before = _calls(pg)
    r, n = pg.rank(), pg.size()
    x = _data(n * 6, torch.float32, r, 11).reshape(n * 3, 2)
    ours, theirs = torch.empty(n * 3, 2), torch.empty(n * 3, 2)
    dist.all_to_all_single(ours, x, group=pg)
    dist.all_to_all_single(theirs, x, group=gg)
    same = torch.equal(ours, theirs)
    send = [(r + p) % 3 + 1 for p in range(n)]
    recv = [(p + r) % 3 + 1 for p in range(n)]
    y = _data(sum(send), torch.int64, r, 12)
    ours, theirs = torch.empty(sum(recv), dtype=torch.int64), torch.empty(sum(recv), dtype=torch.int64)
    dist.all_to_all_single(ours, y, recv, send, group=pg)
    dist.all_to_all_single(theirs, y, recv, send, group=gg)
    return same and torch.equal(ours, theirs), dict(_calls(pg) - before)


def case_unsupported():
    pg, _ = _pair(WORLD)
    before = tb.engine_group(pg).counters()
    calls = {
        "BAND is not supported for floating dtype float32": lambda: dist.all_reduce(torch.ones(6), op=R.BAND,
                                                                                    group=pg),
        "PREMUL_SUM needs a floating": lambda: dist.all_reduce(torch.ones(6, dtype=torch.int32),
                                                               op=R.PREMUL_SUM(0.5), group=pg),
        "not contiguous": lambda: dist.all_reduce(torch.ones(6, 2).t(), group=pg),
        "SUM only": lambda: dist.all_reduce(torch.ones(3).to_sparse(), op=R.MAX, group=pg),
        # sizes that do not fit the group, each caught by the backend before anything is sent
        "list has 1 entries, the group has 3 ranks": lambda: dist.all_gather([torch.zeros(2)], torch.ones(2), group=pg),
        "has 5 elements, expected 6": lambda: dist.all_gather_into_tensor(torch.zeros(5), torch.ones(2), group=pg),
        "split sizes add up to 4 rows, the tensor has 3": lambda: dist.all_to_all_single(
            torch.zeros(3), torch.ones(3), output_split_sizes=[1, 1, 2], input_split_sizes=[1, 1, 1], group=pg),
        "4 rows do not split into 3 equal parts": lambda: dist.all_to_all_single(torch.zeros(3), torch.ones(4),
                                                                                 group=pg),
        "2 input split sizes, the group has 3 ranks": lambda: dist.all_to_all_single(
            torch.zeros(3), torch.ones(3), output_split_sizes=[1, 1, 1], input_split_sizes=[1, 2], group=pg),
        "negative split size -1": lambda: dist.all_to_all_single(
            torch.zeros(3), torch.ones(3), output_split_sizes=[2, 2, -1], input_split_sizes=[1, 1, 1], group=pg),
        "dtypes differ": lambda: dist.all_gather_into_tensor(torch.zeros(6, dtype=torch.float64), torch.ones(2),
                                                             group=pg),
    }
    errors = {k: _raises(fn, (NotImplementedError, ValueError, TypeError, RuntimeError)) for k, fn in calls.items()}
    unchanged = tb.engine_group(pg).counters() == before
    t = torch.ones(6)
    dist.all_reduce(t, group=pg)  # the group still works after the refusals
    return errors, unchanged, t.tolist()


def case_new_calls(size):
    """reduce, gather, scatter, all_to_all, recv from any source, the coalesced calls and
    sparse all-reduce through dist.*, against Gloo; monitored_barrier naming a late rank."""
    pair = _pair(size)
    if pair is None:
        return None
    pg, gg = pair
    me, n = pg.rank(), pg.size()
    out = {}
    for name, g in (("pycollect", pg), ("gloo", gg)):
        res = {}
        t = _data(7, torch.float32, me, 1)
        dist.reduce(t, group=g, group_dst=n - 1, op=R.MAX)
        res["reduce"] = t if me == n - 1 else None
        slots = [torch.empty(3, dtype=torch.int64) for _ in range(n)] if me == 0 else None
        dist.gather(_data(3, torch.int64, me, 2), slots, group=g, group_dst=0)
        res["gather"] = slots
        o = torch.empty(4)
        dist.scatter(o, [_data(4, torch.float32, k, 3) for k in range(n)] if me == 1 else None, group=g,
                     group_src=1)
        res["scatter"] = o
        outs = [torch.empty(3) for p in range(n)]  # Gloo's list form needs equal sizes
        dist.all_to_all(outs, [_data(3, torch.float32, me * n + p, 4) for p in range(n)], group=g)
        res["all_to_all"] = outs
        ts = [_data(5, torch.float64, me, 5), _data(2, torch.float64, me, 6)]
        dist.all_reduce_coalesced(ts, group=g)
        res["all_reduce_coalesced"] = ts
        rows = [[torch.empty(2), torch.empty(3)] for _ in range(n)]
        dist.all_gather_coalesced(rows, [_data(2, torch.float32, me, 7), _data(3, torch.float32, me, 8)], group=g)
        res["all_gather_coalesced"] = rows
        sp = torch.sparse_coo_tensor([[me, (me + 1) % n]], [1.0, 2.0], (n,))
        dist.all_reduce(sp, group=g)
        res["sparse"] = sp.to_dense()
        if me == 0:
            got = sorted(dist.recv(torch.empty(2), group=g, tag=3) for _ in range(n - 1))
            res["recv_any"] = got
        else:
            dist.send(torch.ones(2), 0, group=g, tag=3)
        out[name] = res
    same = {k: _equal(out["pycollect"][k], out["gloo"][k]) for k in out["gloo"]}
    # monitored_barrier: the last rank arrives late; rank 0 names it, the group goes on
    late = None
    if me == n - 1:
        time.sleep(1.0)
    try:
        tb.monitored_barrier(pg, datetime.timedelta(seconds=0.3))
    except RuntimeError as e:
        late = str(e)
    dist.barrier(group=pg)
    tb.monitored_barrier(pg, datetime.timedelta(seconds=30), wait_all_ranks=True)
    return same, late


def _equal(a, b) -> bool:
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if a is None or isinstance(a, int):
        return a == b
    return torch.allclose(a, b, rtol=1e-6, atol=1e-6) and a.dtype == b.dtype


def case_default_group_env(port):
    """init_process_group("pycollect") by env:// (as under torchrun), then DDP and teardown."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    tb.register()
    dist.init_process_group("pycollect", rank=pc.get_rank(), world_size=pc.get_world_size(),
                            timeout=datetime.timedelta(seconds=60))
    world = dist.group.WORLD
    mesh_group = init_device_mesh("cpu", (2,)).get_group()
    torch.manual_seed(0)
    model = DDP(_Net())
    x, y = _batch(0, dist.get_rank())
    torch.nn.functional.mse_loss(model(x), y).backward()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    gathered = torch.empty(2 * grads.numel())
    dist.all_gather_into_tensor(gathered, grads)
    engine = tb.engine_group()
    counters = engine.counters()
    ours = tb.is_backend(world)
    dist.destroy_process_group()
    try:
        api.get_world_size(engine)  # a destroyed group is refused
        released = False
    except ValueError:
        released = True
    return dict(backend_world=ours, mesh_is_world=mesh_group is world,
                grads_equal=bool(torch.equal(gathered[: grads.numel()], gathered[grads.numel():])),
                counters=counters, released=released)


def case_abort_while_blocked(method: str):
    """Rank 0 issues an all-reduce that the others never join, then ends the group as torch
    does (ProcessGroup.abort or .shutdown): that returns at once and the blocked call raises."""
    rank = dist.get_rank()
    pg = dist.new_group(backend="pycollect")
    out = {}
    if rank == 0:
        w = dist.all_reduce(torch.ones(1 << 20), group=pg, async_op=True)
        time.sleep(0.3)
        t0 = time.monotonic()
        getattr(pg, method)()
        out["abort_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        try:
            w.wait()
            out["wait"] = "no error"
        except Exception as e:  # noqa: BLE001 - the test reads it
            out["wait"] = f"{type(e).__name__}: {e}"
        out["wait_s"] = time.monotonic() - t0
        late = w.get_future()  # first asked for after the call failed: made then, with its error
        out["future_done"] = late.done()
        try:
            late.wait()
            out["future"] = "no error"
        except Exception as e:  # noqa: BLE001 - the test reads it
            out["future"] = str(e)
    else:
        time.sleep(0.6)  # until rank 0 aborted: its links close, so this group is gone here too
    dist.destroy_process_group(pg)
    return out


# -- tests -----------------------------------------------------------------------------


def test_registration(pool3):
    for r in pool3.run(case_registration):
        assert r["in_list"] and r["backend"] == "pycollect" and r["name_backend"] == "pycollect"
        assert r["name_native"] == "pycollect", r
        assert r["resolves"], "torch cannot resolve the group by its name (DeviceMesh/FSDP2 need it)"
        assert r["cpu_default"] == "gloo", "registering must not change the default CPU backend"
        assert r["engine_size"] == WORLD
        assert r["not_ours"] and "pycollect" in r["not_ours"]


def test_registration_without_importing_pycollect():
    """torch's backend autoload (its "torch.backends" entry points, our pyproject's) makes
    "pycollect" a backend for a program that never imports pycollect; with the autoload
    turned off, importing pycollect before torch.distributed still registers it (the
    import hook kept for older torch)."""
    import subprocess
    import sys

    probe = ("import sys, torch, torch.distributed as dist\n"
             "first = 'PYCOLLECT' in dist.Backend._plugins\n"
             "print(first, 'pycollect' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "True"], out.stdout + out.stderr
    hooked = ("import os, sys; import pycollect\n"
              "hooks = [type(f).__name__ for f in sys.meta_path if type(f).__name__ == '_AfterImport']\n"
              "import torch.distributed as dist\n"
              "print(hooks, 'PYCOLLECT' in dist.Backend._plugins)\n")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    out = subprocess.run([sys.executable, "-c", hooked], capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.strip() == "['_AfterImport'] True", out.stdout + out.stderr


@pytest.mark.parametrize("size", [2, WORLD])
def test_every_collective_matches_gloo_and_runs_on_engine(pool3, size):
    results = [r for r in pool3.run(case_cross_check, size) if r is not None]
    assert len(results) == size
    for bad, delta, expected, _ in results:
        assert bad == []
        assert delta == expected, "a dist.* call did not run (exactly once) on the pycollect engine"
    keeps = [keep for *_, keep in results]
    for key, value in keeps[0].items():
        for other in keeps[1:]:
            assert torch.equal(value, other[key]), f"ranks disagree bitwise on {key}"


_ENGINE_KIND = {"all_reduce": "all_reduce", "broadcast": "broadcast", "all_gather": "all_gather",
                "all_gather_into_tensor": "all_gather", "reduce_scatter": "reduce_scatter",
                "reduce_scatter_tensor": "reduce_scatter"}


@pytest.mark.parametrize("size", [2, WORLD])
@pytest.mark.parametrize("kind", list(_ENGINE_KIND))
def test_core_cross_check_suite_through_backend(pool3, kind, size):
    results = [r for r in pool3.run(case_core_suite, kind, size) if r is not None]
    assert len(results) == size
    for out, delta in results:
        assert out["cases"] > 0
        assert delta == {_ENGINE_KIND[kind]: out["cases"]}, "a case did not run (exactly once) on the engine"
    if not kind.startswith("reduce_scatter"):  # every rank holds the same result
        assert all(out["digests"] == results[0][0]["digests"] for out, _ in results)


@pytest.mark.parametrize("size", [2, WORLD])
def test_ddp_matches_gloo(pool3, size):
    results = [r for r in pool3.run(case_ddp, size) if r is not None]
    assert len(results) == size
    for params, delta in results:
        for ours, ref in zip(params["pycollect"], params["gloo"]):
            torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-7)
        assert delta.get("all_reduce", 0) >= 5, f"DDP gradients did not all-reduce on the engine: {delta}"
        assert delta.get("broadcast", 0) >= 1, f"DDP's initial parameter broadcast bypassed the engine: {delta}"
    for other in results[1:]:  # DDP keeps replicas identical
        for a, b in zip(results[0][0]["pycollect"], other[0]["pycollect"]):
            assert torch.equal(a, b)


@pytest.mark.parametrize("size, factor", [(2, None), (WORLD, None), (2, 5.0), (WORLD, 7.5)])
def test_fsdp2_matches_gloo(pool3, size, factor):
    results = [r for r in pool3.run(case_fsdp, size, factor) if r is not None]
    assert len(results) == size
    for losses, delta, ops, is_ours in results:
        assert is_ours
        torch.testing.assert_close(losses["pycollect"], losses["gloo"], rtol=1e-5, atol=1e-6)
        assert losses["pycollect"][-1] < losses["pycollect"][0], "training did not reduce the loss"
        assert ops == (["AVG"] if factor is None else ["PREMUL_SUM"])
        assert delta.get("all_gather", 0) >= 4 * 4 and delta.get("reduce_scatter", 0) >= 4 * 4, delta


def test_work_future_timeout_and_gil(pool3):
    r0, r1, _ = pool3.run(case_work_semantics)
    assert r0["then"] == r1["then"] == [30.0] * 4
    assert r0["timeout"] and "recv" in r0["timeout"] and "still running" in r0["timeout"]
    assert r0["done_after_timeout"] is False
    assert r0["ticks_while_waiting"] > 1000, "the waiting thread held the GIL"
    assert r0["received"] and r0["success"]
    assert r0["engine"] == r1["engine"] == {"all_reduce": 1, "send/recv": 1}
    for r in (r0, r1):
        assert r["late_future"]["pycollect"] == r["late_future"]["gloo"] == (True, [3.0] * 3, [6.0] * 3)


@pytest.mark.parametrize("nbytes", [64, 1 << 20])
def test_async_collectives_return_at_once_while_the_peer_is_late(pool3, nbytes):
    """An async_op=True all-reduce, broadcast, all-gather and reduce-scatter return within
    5 ms while the peer joins 1 s late (before, a small one ran on the caller's thread and
    returned after the peer came: 1.5 s), as on Gloo in the same run; the results are right."""
    out = pool3.run(case_async_returns_at_once, nbytes)[0]
    for backend, (returned, right) in out.items():
        assert right, backend
    # The contract is not waiting for the peer (1 s): each call far below it even on a loaded
    # machine (a thread may wait for a core), and typically within 5 ms.
    returned = out["pycollect"][0]
    for call, seconds in returned.items():
        assert seconds < 0.1, f"{call} of {nbytes} B took {seconds * 1e3:.1f} ms to return"
    assert sorted(returned.values())[len(returned) // 2] < 0.005, returned


@pytest.mark.parametrize("mode", ["send", "isend", "batch"])
@pytest.mark.parametrize("nbytes", [64, 1 << 20])
def test_cross_group_schedule_runs_as_on_gloo(pool4, mode, nbytes):
    """Data-parallel all-reduces across pipeline sends, in the order that made every rank wait
    for the group timeout on "pycollect" with 64-byte tensors (the async all-reduce ran on the
    caller's thread and waited for a peer that was waiting for this rank's send): every rank
    finishes within seconds with the right results, as on Gloo in the same run."""
    for backend in ("gloo", "pycollect"):
        results = pool4.run(case_cross_group_schedule, backend, nbytes, mode)
        for rank, (took, value, got) in enumerate(results):
            assert took < 5.0, f"{backend}, rank {rank}: {took:.1f} s"
            assert value == (4.0 if rank % 2 == 0 else 6.0), (backend, rank, value)
            assert got == {0: None, 1: 10.0, 2: 13.0, 3: None}[rank], (backend, rank, got)


@pytest.mark.parametrize("method", ["abort", "shutdown"])
def test_abort_returns_at_once_and_the_blocked_call_raises(pool3, method):
    out = pool3.run(case_abort_while_blocked, method)[0]
    assert out["abort_s"] < 1.0 and out["wait_s"] < 1.0, out
    # torch's type (as NCCL's and Gloo's failures), the engine's message naming rank and call
    assert out["wait"].startswith("DistBackendError") and "destroyed" in out["wait"], out
    assert "rank 0 all_reduce" in out["wait"], out
    assert out["future_done"] and "destroyed" in out["future"] and "rank 0 all_reduce" in out["future"], out


@pytest.mark.parametrize("size", [2, 3])
def test_all_to_all_single_matches_gloo_on_the_engine(pool3, size):
    for res in pool3.run(case_all_to_all, size):
        if res is None:
            continue
        same, engine = res
        assert same
        assert engine == {"all_to_all": 2}, engine  # 2 calls, each one engine all-to-all


def test_unsupported_calls_raise_naming_the_method(pool3):
    for errors, unchanged, after in pool3.run(case_unsupported):
        for key, message in errors.items():
            assert message is not None, f"{key} did not raise"
            assert key in message, message
        assert unchanged, "a refused call reached the engine"
        assert after == [float(WORLD)] * 6


@pytest.mark.parametrize("size", [2, WORLD])
def test_new_calls_match_gloo(pool3, size):
    results = [res for res in pool3.run(case_new_calls, size) if res is not None]
    assert len(results) == size
    for r, (same, late) in enumerate(results):
        assert all(same.values()), f"rank {r}: differs from Gloo: {[k for k, v in same.items() if not v]}"
        if r == 0:
            assert late is not None and f"Rank {size - 1} failed to pass monitoredBarrier" in late, late
        elif r < size - 1:
            assert late is not None and "received errors while waiting" in late, late


@pytest.mark.slow
def test_default_group_by_env():
    with RankPool(2, init_gloo=False) as default_pool:
        results = default_pool.run(case_default_group_env, free_port())
    for r in results:
        assert r["backend_world"] and r["mesh_is_world"] and r["grads_equal"] and r["released"]
        assert r["counters"].get("all_reduce", 0) >= 1 and r["counters"].get("broadcast", 0) >= 1
        assert r["counters"].get("all_gather", 0) >= 2


# -- the build: the backend is built against the torch it runs with ---------------------------


def test_another_torch_without_first_use_builds_is_refused_naming_both_versions(monkeypatch, tmp_path):
    """The native module is built against one torch (torch_build.txt beside it). Under another
    it is compiled on first use (builder.py); with that turned off, loading raises
    ImportError naming both versions and the command that rebuilds, before anything of the
    mismatched module is loaded, and nothing lands in the cache; pycollect's own API keeps
    working."""
    import numpy as np

    from pycollect.torch_backend import builder, native

    assert native.built_against() == torch.__version__  # this build: the running torch
    monkeypatch.setattr(native, "_module", None)
    monkeypatch.setattr(native, "built_against", lambda: "2.0.0+elsewhere")
    monkeypatch.setenv(builder.SWITCH, "0")
    monkeypatch.setenv("PYCOLLECT_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ImportError) as e:
        native.load()
    message = str(e.value)
    assert "2.0.0+elsewhere" in message and torch.__version__ in message, message
    assert "pip install --no-build-isolation" in message and builder.SWITCH in message, message
    assert not (tmp_path / "cache").exists()
    pc.init_process_group(init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        x = np.arange(4, dtype=np.float32)
        pc.all_reduce(x)
        assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
    finally:
        pc.destroy_process_group()


@pytest.fixture
def first_use(monkeypatch, tmp_path):
    """A process with no backend built for its torch, and a cache of its own."""
    from pycollect.torch_backend import native

    monkeypatch.setattr(native, "_module", None)
    monkeypatch.setattr(native, "built_against", lambda: None)
    monkeypatch.setenv("PYCOLLECT_CACHE_DIR", str(tmp_path / "cache"))
    return native


def test_first_use_build_without_a_compiler_says_so_and_leaves_no_module(first_use, monkeypatch, tmp_path):
    """No compiler where one must compile: ImportError naming $CXX and the way out; the cache
    holds no module (a later process with a compiler builds it)."""
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(ImportError) as e:
        first_use.load()
    assert "no-such-compiler" in str(e.value) and "pip install --no-build-isolation" in str(e.value), str(e.value)
    assert not list((tmp_path / "cache").rglob("*.so"))


def test_first_use_build_with_an_unwritable_cache_names_the_variable(first_use, monkeypatch):
    monkeypatch.setenv("PYCOLLECT_CACHE_DIR", "/proc/no-such-place")  # cannot be made, even by root
    with pytest.raises(ImportError, match="PYCOLLECT_CACHE_DIR"):
        first_use.load()


def test_first_use_build_refuses_an_engine_of_another_cxx_abi(first_use, monkeypatch):
    import pycollect._C as C

    monkeypatch.setattr(C, "CXX11_ABI", 1 - int(torch._C._GLIBCXX_USE_CXX11_ABI))
    with pytest.raises(ImportError, match="_GLIBCXX_USE_CXX11_ABI") as e:
        first_use.load()
    assert "pip install --no-build-isolation" in str(e.value)


def test_first_use_build_without_python_headers_says_so(first_use, monkeypatch, tmp_path):
    import sysconfig

    paths = dict(sysconfig.get_paths(), include=str(tmp_path / "no-headers"))
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: paths)
    with pytest.raises(ImportError, match="Python.h"):
        first_use.load()


def test_first_use_build_without_shipped_sources_says_so(first_use, monkeypatch, tmp_path):
    from pycollect.torch_backend import builder

    monkeypatch.setattr(builder, "source_dir", lambda: str(tmp_path / "no-sources"))
    with pytest.raises(ImportError, match="no sources for its torch backend"):
        first_use.load()


def test_a_failed_first_use_compile_keeps_its_log_and_names_it(first_use, monkeypatch, tmp_path):
    """A compiler that fails: ImportError naming the log, which holds the command; no module
    and no half-built directory left in the cache."""
    fake = tmp_path / "failing-cxx"
    fake.write_text("#!/bin/sh\necho 'error: this compiler always fails' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    with pytest.raises(ImportError, match="always fails") as e:
        first_use.load()
    logs = list((tmp_path / "cache").rglob("*.failed.log"))
    assert len(logs) == 1 and str(logs[0]) in str(e.value), str(e.value)
    assert str(fake) in logs[0].read_text() and "always fails" in logs[0].read_text()
    assert not list((tmp_path / "cache").rglob("*.so")) and not list((tmp_path / "cache").rglob("*.tmp*"))


def test_first_use_build_key_follows_torch_and_every_source(tmp_path):
    """The cache entry is named for torch's version and a digest of what the binary depends
    on: another torch (same version elsewhere too), or one changed header, is another entry;
    the same inputs, the same entry."""
    import shutil
    import types

    from pycollect.torch_backend import builder

    src = tmp_path / "src"
    shutil.copytree(builder.source_dir(), src)
    assert (src / "torch_backend" / "backend.cc").exists() and (src / "comm" / "communicator.h").exists()

    def fake(version, where):
        return types.SimpleNamespace(__version__=version, __file__=where,
                                     _C=types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=True))

    here = fake("2.13.0+cpu", "/a/torch/__init__.py")
    key = builder.build_key(here, str(src))
    assert key.startswith("torch-2.13.0+cpu-")
    assert builder.build_key(here, str(src)) == key
    assert builder.build_key(fake("2.14.0", "/a/torch/__init__.py"), str(src)) != key
    assert builder.build_key(fake("2.13.0+cpu", "/b/torch/__init__.py"), str(src)) != key
    with open(src / "comm" / "communicator.h", "a") as f:
        f.write("\n")
    assert builder.build_key(here, str(src)) != key


def test_a_python_without_torch_configures_the_engine_alone(tmp_path):
    """CMake with a Python that has no torch: the engine and pycollect._C, no torch backend
    (the configure step says so); with the venv's Python the backend is a target too."""
    import shutil
    import subprocess
    import sys
    import venv

    import pybind11

    cmake = shutil.which("cmake", path=os.path.dirname(sys.executable)) or shutil.which("cmake")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)  # the base Python's headers, no packages
    targets = {}
    for name, python in (("bare", bare / "bin" / "python"), ("torch", sys.executable)):
        build = tmp_path / f"build-{name}"
        p = subprocess.run([cmake, "-S", root, "-B", str(build), "-G", "Ninja", f"-DPython_EXECUTABLE={python}",
                            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}"], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        listed = subprocess.run([shutil.which("ninja", path=os.path.dirname(sys.executable)) or "ninja", "-C",
                                 str(build), "-t", "targets", "all"], capture_output=True, text=True, timeout=60)
        targets[name] = listed.stdout
        if name == "bare":
            assert "building the engine without the torch backend" in p.stdout, p.stdout
    assert "libpycollect_engine.so" in targets["bare"] and "_C." in targets["bare"]
    assert "_torch." not in targets["bare"]
    assert "_torch." in targets["torch"]


# -- real clients: torch's own parallelism libraries, on "pycollect" and on Gloo --------------
#
# The rank-side bodies are in tests/real_client_cases.py. Each runs one unchanged torch client
# twice in the same ranks, on the pycollect group and on the Gloo group over the same ranks
# (the _pair groups above), from the same seeds, and the engine's counters must show that
# the client's calls ran on pycollect.
#
# On the 2-rank group the two runs must be bit-identical: every reduction there is one
# addition a+b, which gives the same bits whichever engine computes it, and the rest is the
# same client code on the same data. On 3 ranks a float sum a+b+c depends on the order of
# its additions, and the engine's order differs from Gloo's (Gloo's ring reduces chunk k
# starting at rank k+1, the engine's small-message path in rank order; both are correct and
# deterministic): there the runs must agree within float32 rounding.

import real_client_cases as rcc  # noqa: E402 - this section's rank-side module


def _mismatches(ours, ref, exact=True, path="") -> list:
    """Where two nested results (dicts, lists, tensors, numbers) differ; [] if they agree
    (bit for bit when `exact`, else within float32 rounding)."""
    if isinstance(ref, dict):
        if set(ours) != set(ref):
            return [f"{path}: keys {sorted(map(str, ours))} != {sorted(map(str, ref))}"]
        return [m for k in ref for m in _mismatches(ours[k], ref[k], exact, f"{path}.{k}")]
    if isinstance(ref, (list, tuple)):
        if len(ours) != len(ref):
            return [f"{path}: {len(ours)} items != {len(ref)}"]
        return [m for i, (a, b) in enumerate(zip(ours, ref)) for m in _mismatches(a, b, exact, f"{path}[{i}]")]
    if torch.is_tensor(ref):
        if ours.dtype != ref.dtype or ours.shape != ref.shape:
            return [f"{path}: {ours.dtype}{tuple(ours.shape)} != {ref.dtype}{tuple(ref.shape)}"]
        same = torch.equal(ours, ref) if exact else torch.allclose(ours, ref, rtol=1e-5, atol=1e-6)
        if not same:
            return [f"{path}: differs (max |diff| {(ours.double() - ref.double()).abs().max().item():.3g})"]
        return []
    return [] if ours == ref else [f"{path}: {ours!r} != {ref!r}"]


def _results(results, size):
    """The results of the group's ranks (the others return None), each rank's pycollect run
    checked against its Gloo run: bit-identical on 2 ranks (see above)."""
    results = [r for r in results if r is not None]
    assert len(results) == size
    for rank, (out, *_) in enumerate(results):
        bad = _mismatches(out["pycollect"], out["gloo"], exact=size == 2)
        assert bad == [], f"rank {rank}: pycollect differs from Gloo: {bad[:10]}"
    return results


@pytest.mark.parametrize("size", [2, WORLD])
def test_real_client_tensor_parallel(pool3, size):
    """DTensor TP (ColwiseParallel fc1, RowwiseParallel fc2) over DeviceMesh.from_group: outputs,
    the input's gradient, full parameter gradients and parameters as on Gloo; the shards
    were scattered, the replicated bias broadcast, the partial sums all-reduced (forward
    output and input gradient, each step) and full_tensor() all-gathered on the engine."""
    results = _results(pool3.run(rcc.case_tensor_parallel, size), size)
    for out, engine in results:
        ours = out["pycollect"]
        assert ours["placements"]["fc1.weight"] == "(Shard(dim=0),)", ours["placements"]
        assert ours["placements"]["fc2.weight"] == "(Shard(dim=1),)", ours["placements"]
        assert engine.get("scatter", 0) >= 3 and engine.get("broadcast", 0) >= 1, engine
        assert engine.get("all_reduce", 0) >= 2 * 2, engine  # 2 steps x (output, input gradient)
        assert engine.get("all_gather", 0) >= 6, engine  # full_tensor() of 3 sharded gradients and parameters
    for other in results[1:]:  # RowwiseParallel's output is replicated: every rank holds it
        assert _mismatches(other[0]["pycollect"]["outputs"], results[0][0]["pycollect"]["outputs"]) == []


@pytest.mark.parametrize("size", [2, WORLD])
def test_real_client_fsdp2_distributed_checkpoint(pool3, size):
    """FSDP2 + DCP: after one step, dcp.save and dcp.load on the group restore a fresh sharded
    model's parameters and Adam state bit for bit; save and load ran their plan exchange
    (gather, scatter, broadcast) on the engine; everything as on Gloo."""
    results = _results(pool3.run(rcc.case_fsdp2_checkpoint, size), size)
    for out, engine, dcp_calls in results:
        for backend, run in out.items():
            assert _mismatches(run["loaded"], run["saved"]) == [], f"{backend}: load != save"
            assert _mismatches(run["loaded_opt"], run["saved_opt"]) == [], f"{backend}: optimizer load != save"
            assert len(run["saved_opt"]) == 3 * len(run["saved"]), "no Adam state saved"  # step, exp_avg, exp_avg_sq
            assert _mismatches(run["differs"], run["saved"]) != [], "the fresh model already equalled the saved one"
            assert ".metadata" in run["files"] and any(f.endswith(".distcp") for f in run["files"]), run["files"]
        assert engine.get("reduce_scatter", 0) >= 2 * 4 and engine.get("all_gather", 0) >= 2 * 4, engine
        save, load = dcp_calls["save"], dcp_calls["load"]
        assert save.get("gather", 0) >= 1 and save.get("scatter", 0) >= 1, f"dcp.save bypassed the engine: {save}"
        assert load.get("gather", 0) >= 1 and load.get("scatter", 0) >= 1, f"dcp.load bypassed the engine: {load}"


def test_real_client_pipeline_1f1b(pool3):
    """torch.distributed.pipelining: 2 stages on the 2-rank group, Schedule1F1B with 4
    micro-batches, 2 SGD steps: losses (last stage), gradients and parameters as on Gloo;
    activations and gradients crossed through the engine's send/recv."""
    results = _results(pool3.run(rcc.case_pipeline_1f1b), 2)
    (first, first_engine), (last, last_engine) = results
    assert first["pycollect"]["losses"] == [] and len(last["pycollect"]["losses"]) == 2
    assert all(len(step) == 4 for step in last["pycollect"]["losses"])
    for engine in (first_engine, last_engine):
        assert engine.get("send/recv", 0) >= 2 * 4 * 2, engine  # steps x micro-batches x (forward + backward)


@pytest.mark.parametrize("size", [2, WORLD])
def test_real_client_ddp_comm_hooks(pool3, size):
    """DDP + PowerSGD (approximation rank 1, compressing from step 2; all-reduces issued and waited on
    inside Future callbacks) and DDP + the default allreduce hook, 4 steps each: parameters,
    losses and PowerSGD's P, Q and error-feedback state as on Gloo."""
    results = _results(pool3.run(rcc.case_ddp_comm_hooks, size), size)
    for out, engine in results:
        state = out["pycollect"]["powerSGD"]
        assert state["iter"] == 4 and state["p"] and state["q"] and state["errors"], "PowerSGD did not compress"
        # steps 0-1: one plain all-reduce each; steps 2-3: uncompressed tensors, then P, then Q
        assert engine["powerSGD"].get("all_reduce", 0) == 2 + 2 * 3, engine
        assert engine["allreduce"].get("all_reduce", 0) >= 4, engine
    for other in results[1:]:  # DDP keeps the replicas identical
        for hook in ("powerSGD", "allreduce"):
            assert _mismatches(other[0]["pycollect"][hook]["params"], results[0][0]["pycollect"][hook]["params"]) == []


@pytest.mark.parametrize("size", [2, WORLD])
def test_real_client_zero_redundancy_optimizer(pool3, size):
    """DDP + ZeroRedundancyOptimizer(Adam, process_group=group), 3 steps: each rank steps its
    shard and broadcasts it on the engine; parameters, losses and the state consolidated
    on rank 0 as on Gloo."""
    results = _results(pool3.run(rcc.case_zero_redundancy, size), size)
    for rank, (out, engine) in enumerate(results):
        ours = out["pycollect"]
        assert len(ours["owned"]) == size and all(ours["owned"]), ours["owned"]
        assert engine.get("broadcast", 0) >= 3 * sum(ours["owned"]), engine  # every parameter, every step
        assert engine.get("all_reduce", 0) >= 3, engine
        assert (ours["consolidated"] is not None) == (rank == 0)
    consolidated = results[0][0]["pycollect"]["consolidated"]  # step, exp_avg, exp_avg_sq of every parameter
    assert len(consolidated) == 3 * sum(results[0][0]["pycollect"]["owned"])
    for other in results[1:]:
        assert _mismatches(other[0]["pycollect"]["params"], results[0][0]["pycollect"]["params"]) == []


@pytest.mark.parametrize("size", [2, WORLD])
def test_real_client_join_uneven_inputs(pool3, size):
    """DDP under `with Join([model])`, rank r training on r + 2 batches: every rank finishes,
    with the same parameters, as on Gloo; the shadowed all-reduces ran on the engine."""
    results = _results(pool3.run(rcc.case_join_uneven, size), size)
    for rank, (out, engine) in enumerate(results):
        assert len(out["pycollect"]["losses"]) == rank + 2
        assert engine.get("all_reduce", 0) >= size + 1, engine  # the longest rank's batches
    for other in results[1:]:
        assert _mismatches(other[0]["pycollect"]["params"], results[0][0]["pycollect"]["params"]) == []


def test_split_group_and_device_mesh_beside_gloo(pool4):
    """A "pycollect" group over 4 ranks splits 2 x 2 (ProcessGroup.split_group, the backend's
    split) and a (2, 2) DeviceMesh runs its dimensions on "pycollect", as the same on Gloo:
    the same sums, ranks and sizes, and a DTensor sum over the mesh."""
    import shrink_cases

    for r, got in enumerate(pool4.run(shrink_cases.case_split_and_mesh, timeout=120)):
        ours, ref = got["pycollect"], got["gloo"]
        half = [0, 1] if r < 2 else [2, 3]
        assert ref["split"] == (2, r % 2, [float(sum(q + 1 for q in half))] * 3), (r, ref)
        assert ours["split"] == ref["split"] and ours["mesh"] == ref["mesh"], (r, ours, ref)
        assert ours["dtensor_sum"] == ref["dtensor_sum"] == float(sum(range(16))), (r, ours, ref)
        assert ours["mesh_backend"] == "pycollect" and ref["mesh_backend"] == "gloo", (r, ours, ref)
