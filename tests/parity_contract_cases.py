"""Rank-side programs of tests/test_parity_contract.py: whatever runs on Gloo runs on
"pycollect" (issue 54's contract gaps).

Each program is one valid torch.distributed program, run twice in the same ranks: on the
"pycollect" torch group and on the Gloo group over the same ranks (test_torch_backend's
_pair: groups made once per worker, in the same order everywhere). A program returns what
the test compares between the two runs ({"pycollect": ..., "gloo": ...}); where torch
itself treats a third-party backend differently from Gloo (it refuses it by name, or
returns it wrapped), the program records that too, and the test says why it differs.

case_contract runs the quick programs in one pool call (each program's failure is kept
as its result, so that one broken program fails one test); the programs that make groups
of their own, fail a group or wait for a late peer have a case each. Every case takes
the group size (2: ranks {0, 1}; 3: the whole pool) and returns None on a rank outside.
"""
from __future__ import annotations

import datetime
import time
import traceback
import warnings

import torch
import torch.distributed as dist

import pycollect.torch_backend as tb
from rank_pool import paired_groups
from test_torch_backend import _calls, _pair, _ViaBackend

BACKENDS = ("pycollect", "gloo")
R = dist.ReduceOp
TRIALS = 12  # of each timing-dependent program: the completion lands on either thread


def _both(size, program):
    """{backend: program(group)} on the pair of `size`, or None outside it."""
    pair = _pair(size)
    if pair is None:
        return None
    return {name: program(g) for name, g in zip(BACKENDS, pair)}


def _error(fn):
    """(type name, message) of what `fn` raised, or None."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the test compares it
        return type(e).__name__, str(e)
    return None


def _native(g):
    """The backend object torch holds for `g`'s CPU tensors (Gloo's, or pycollect's)."""
    return g._get_backend(torch.device("cpu"))


# -- the finish step under the caller's thread-local state ------------------------------------


def _thread_local_state(g):
    """List all-gathers under torch.inference_mode() and under no_grad() into outputs that
    require grad (the finish step copies into them), and a sparse all-reduce under
    inference_mode (its finish step sums into the tensor): blocking (the call completes on
    the caller's thread), async waited at once, and async waited once the engine's worker
    had time to complete it. Returns (errors, results)."""
    me, n = g.rank(), g.size()
    errors, results = [], []
    for trial in range(TRIALS):
        for mode in ("inference_mode", "no_grad"):
            for how in ("blocking", "async", "async, late wait"):
                with torch.inference_mode() if mode == "inference_mode" else torch.no_grad():
                    outs = [torch.zeros(8, requires_grad=mode == "no_grad") for _ in range(n)]
                    x = torch.full((8,), float(10 * trial + me))
                    sp = torch.sparse_coo_tensor([[me, n]], [1.0 + trial, 2.0], (n + 1,))
                    try:
                        if how == "blocking":
                            dist.all_gather(outs, x, group=g)
                            dist.all_reduce(sp, group=g)
                        else:
                            works = [dist.all_gather(outs, x, group=g, async_op=True),
                                     dist.all_reduce(sp, group=g, async_op=True)]
                            if how == "async, late wait":
                                time.sleep(0.003)
                            for w in works:
                                w.wait()
                        results.append([o.detach().tolist() for o in outs] + [sp.to_dense().tolist()])
                    except RuntimeError as e:
                        errors.append(f"{mode}, {how}: {str(e).splitlines()[0]}")
    return errors, results


# -- the Future before the Work ----------------------------------------------------------------


def _callbacks_before_wait(g):
    """Whether a then() callback (10 ms long) had run when wait() returned, trial by trial:
    waited at once, or 3 ms later (the engine's worker completes the call meanwhile and is
    still in the callback when wait() is called)."""
    seen = []
    for trial in range(TRIALS):
        ran = []
        w = dist.all_reduce(torch.ones(4), group=g, async_op=True)
        w.get_future().then(lambda f, ran=ran: (time.sleep(0.010), ran.append(True)))
        if trial % 2:
            time.sleep(0.003)
        w.wait()
        seen.append(bool(ran))
    return seen


# -- sequence numbers -------------------------------------------------------------------------


def _sequence_numbers(g):
    """The backend's sequence number after each call of a program with collectives,
    sends and receives, calls both backends refuse and an async call; and what the
    group-level accessor says at the end."""
    me, n = g.rank(), g.size()
    backend = _native(g)
    seen = [backend._get_sequence_number_for_group()]

    def step(fn):
        fn()
        seen.append(backend._get_sequence_number_for_group())

    step(lambda: dist.all_reduce(torch.ones(3), group=g))
    got = torch.empty(2)

    def ring():  # everyone sends to the next rank and receives from the previous one
        works = [dist.isend(torch.full((2,), float(me)), group=g, group_dst=(me + 1) % n),
                 dist.irecv(got, group=g, group_src=(me - 1) % n)]
        for w in works:
            w.wait()

    step(ring)
    # Refused by both: a size that does not fit (Gloo checks it before it counts the call),
    # then a bitwise op on floats (Gloo refuses the op for the dtype after it counted). Not
    # a barrier next: Gloo's waits for the work still in progress, its refused one too.
    step(lambda: _error(lambda: dist.all_gather_into_tensor(torch.empty(2 * n + 1), torch.ones(2), group=g)))
    step(lambda: _error(lambda: dist.all_reduce(torch.ones(3), op=R.BAND, group=g)))
    step(lambda: dist.broadcast(torch.ones(2), group=g, group_src=0))
    step(lambda: dist.barrier(group=g))
    step(lambda: dist.all_gather([torch.empty(2) for _ in range(n)], torch.ones(2), group=g))
    step(lambda: dist.all_reduce(torch.sparse_coo_tensor([[me]], [1.0], (n,)), group=g))
    step(lambda: dist.all_reduce(torch.ones(3), group=g, async_op=True).wait())
    group_level = _error(lambda: g._get_sequence_number_for_group()) or g._get_sequence_number_for_group()
    # The counts from this program's start: the session's other tests used the groups before
    # (not always both backends' alike).
    return [x - seen[0] for x in seen], got.tolist(), group_level, seen[-1]


# -- the profiler -------------------------------------------------------------------------------


def _profiled(g):
    """The communication events torch's profiler records for a few calls: the backend's own
    ("gloo:all_reduce", "pycollect:all_reduce": prefix, name, whether it took time) and
    torch's issuing ("c10d::allreduce_")."""
    from torch.profiler import ProfilerActivity, profile

    me, n = g.rank(), g.size()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        dist.all_reduce(torch.ones(64), group=g)
        dist.all_reduce(torch.ones(64), group=g, async_op=True).wait()
        dist.broadcast(torch.ones(8), group=g, group_src=0)
        dist.all_gather([torch.empty(4) for _ in range(n)], torch.ones(4), group=g)
        dist.reduce(torch.ones(4), group=g, group_dst=0)
        dist.gather(torch.ones(2), [torch.empty(2) for _ in range(n)] if me == 0 else None, group=g, group_dst=0)
        dist.scatter(torch.empty(2), [torch.ones(2) for _ in range(n)] if me == 0 else None, group=g, group_src=0)
        dist.all_to_all_single(torch.empty(2 * n), torch.ones(2 * n), group=g)
        dist.barrier(group=g)
    events = {}
    for e in prof.events():
        prefix, _, call = e.name.partition(":")
        if prefix in ("gloo", "pycollect") and not call.startswith(":"):
            events.setdefault(call, []).append(e.cpu_time_total)
    issued = sorted({e.name for e in prof.events() if e.name.startswith("c10d::")})
    return {call: (len(times), min(times) > 0) for call, times in events.items()}, issued


# -- bitwise ops, outputs with strides, parts of different sizes ------------------------------


def _bitwise_refused_on_floats(g):
    """BAND, BOR and BXOR of float32 and bfloat16: whether each raised naming its op (Gloo:
    RuntimeError "Cannot use ReduceOp.BAND with non-integral dtype"; pycollect: ValueError,
    as every argument it refuses)."""
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        for op in ("BAND", "BOR", "BXOR"):
            err = _error(lambda: dist.all_reduce(torch.ones(3, dtype=dtype), op=getattr(R, op), group=g))
            out[f"{dtype} {op}"] = err is not None and op in err[1]
    t = torch.ones(2)
    dist.all_reduce(t, group=g)  # the group goes on (not a barrier: see _sequence_numbers)
    out["after"] = t.tolist()
    return out


def _strided_all_gather_outputs(g):
    """all_gather into the columns of one tensor (big.unbind(1): views with a stride); then
    rank 0 into columns and the others into tensors of their own (pycollect: one buffer
    copied into the columns on rank 0, straight into the tensors elsewhere; one call)."""
    me, n = g.rank(), g.size()
    big = torch.zeros(5, n + 1)
    dist.all_gather(list(big.unbind(1))[:n], torch.arange(5.0) + 10 * me, group=g)
    rows = torch.zeros(n, 2 * n, dtype=torch.int64)
    dist.all_gather([rows[:, 2 * k] for k in range(n)], torch.full((n,), me + 1), group=g)
    mixed = [rows[:, 2 * k + 1] for k in range(n)] if me == 0 else [torch.zeros(n, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(mixed, torch.full((n,), 10 * me + 3), group=g)
    return big.tolist(), rows.tolist(), [t.tolist() for t in mixed]


def _reduce_scatter_of_different_sizes(g):
    """torch's test_c10d_gloo.py test_reduce_scatter: rank r's output has r elements (rank
    0: none); then r + 1 int64 elements with MAX and PRODUCT, and an async SUM."""
    me, n = g.rank(), g.size()
    out = {}
    o = torch.empty(me)
    dist.reduce_scatter(o, [torch.full((k,), float(me + 1 + k)) for k in range(n)], group=g)
    out["sum"] = o.tolist()
    for op in ("MAX", "PRODUCT"):
        o = torch.empty(me + 1, dtype=torch.int64)
        dist.reduce_scatter(o, [torch.arange(k + 1) + me + k for k in range(n)], op=getattr(R, op), group=g)
        out[op] = o.tolist()
    o = torch.empty(me + 2, dtype=torch.float64)
    w = dist.reduce_scatter(o, [torch.full((k + 2,), 0.5 * (me + k), dtype=torch.float64) for k in range(n)], group=g,
                           async_op=True)
    w.wait()
    out["async"] = o.tolist()
    return out


# -- sparse all-reduce, the monitored barrier, 16-bit sums -----------------------------------------


def _sparse_sums(g):
    """Sparse all-reduces against Gloo: 1-D; 2-D with a dense dimension; a rank with no
    non-zeros; int64 values; async."""
    me, n = g.rank(), g.size()
    out = []
    cases = [
        torch.sparse_coo_tensor([[me, (me + 1) % n, n]], [1.0, 2.0, 3.0], (n + 1,)),
        torch.sparse_coo_tensor([[me, n]], [[1.0 * me, 2.0, 3.0], [4.0, 5.0, 6.0]], (n + 1, 3)),
        torch.sparse_coo_tensor(torch.zeros(1, 0, dtype=torch.int64) if me == 0 else [[me]],
                                torch.zeros(0, 2) if me == 0 else [[7.0, 8.0]], (n, 2)),
        torch.sparse_coo_tensor([[0, me], [me, 1]], torch.tensor([me + 1, 10]), (n, n)),
    ]
    for sp in cases:
        dist.all_reduce(sp, group=g)
        out.append(sp.to_dense().tolist())
    sp = torch.sparse_coo_tensor([[me]], [1.0 + me], (n,))
    dist.all_reduce(sp, group=g, async_op=True).wait()
    out.append(sp.to_dense().tolist())
    return out


def _monitored_barrier(g):
    """torch's dist.monitored_barrier, and what a pycollect group offers instead: the
    group's own pg.monitored_barrier and pycollect.torch_backend.monitored_barrier."""
    t = datetime.timedelta(seconds=30)
    out = {"dist": _error(lambda: dist.monitored_barrier(g, timeout=t))}
    out["pg"] = _error(lambda: g.monitored_barrier(t))
    if tb.is_backend(g):
        out["tb"] = _error(lambda: tb.monitored_barrier(g, t, wait_all_ranks=True))
    return out


def _half_sums(g):
    """float16 and bfloat16 sums of random values, small (the direct algorithm: every rank
    adds in rank order) and large (the ring): the result, and its error against the exact
    (float64) sum of the same inputs, which every rank draws itself."""
    me, n = g.rank(), g.size()
    out = {}
    for dtype in (torch.float16, torch.bfloat16):
        for count in (512, 1 << 16):
            xs = [torch.randn(count, generator=torch.Generator().manual_seed(100 * k + count)).to(dtype)
                  for k in range(n)]
            t = xs[me].clone()
            dist.all_reduce(t, group=g)
            exact = torch.stack([x.double() for x in xs]).sum(0)
            in_order = xs[0].clone()
            for x in xs[1:]:
                in_order = in_order + x  # torch's own 16-bit add: widen, add, round
            err = (t.double() - exact).abs()
            out[f"{dtype} {count}"] = dict(mean_err=err.mean().item(), max_err=err.max().item(),
                                           rank_order=bool(torch.equal(t, in_order)))
    return out


PROGRAMS = {
    "thread_local_state": _thread_local_state,
    "callbacks_before_wait": _callbacks_before_wait,
    "sequence_numbers": _sequence_numbers,
    "profiled": _profiled,
    "bitwise_refused_on_floats": _bitwise_refused_on_floats,
    "strided_all_gather_outputs": _strided_all_gather_outputs,
    "reduce_scatter_of_different_sizes": _reduce_scatter_of_different_sizes,
    "sparse_sums": _sparse_sums,
    "monitored_barrier": _monitored_barrier,
    "half_sums": _half_sums,
}


def case_contract(size):
    """Every quick program on both backends: {program: {backend: result}}, or
    {program: "error: ..."} where a program raised (the others still run)."""
    if _pair(size) is None:
        return None
    before = _calls(_pair(size)[0])
    out = {}
    for name, program in PROGRAMS.items():
        try:
            out[name] = _both(size, program)
        except Exception:  # noqa: BLE001 - one program's failure is its test's
            out[name] = "error: " + traceback.format_exc()
            dist.barrier(group=_pair(size)[1])  # the ranks meet again before the next program
    out["engine"] = dict(_calls(_pair(size)[0]) - before)
    return out


def case_bitwise(size, counts=(0, 1, 13, 4099)):
    """BAND, BOR, BXOR of every integer dtype and bool: all-reduce and reduce-scatter on the
    engine API (against numpy and Gloo) and through the torch backend (the same cases
    routed through dist.*), tests/collective_cases.py's checks."""
    import collective_cases as cc

    dtypes = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool]
    ops = ["BAND", "BOR", "BXOR"]
    engine, pair = paired_groups(size), _pair(size)
    if pair is None:
        return None
    out = {}
    for kind in ("all_reduce", "reduce_scatter_tensor"):
        out["engine", kind] = cc.run_cases(kind, engine, size, 5, counts, dtypes, ops)
        out["torch", kind] = cc.run_cases(kind, pair, size, 5, counts, dtypes, ops, comm=_ViaBackend)
    return out


# -- programs that need their own groups ---------------------------------------------------------


def case_async_sparse_behind_a_late_peer(size):
    """The last rank of the group joins 1 s late; the others time the return of an async
    sparse all-reduce on each backend (one after the other, while it is late), then wait
    for both: {backend: (seconds, result)}."""
    pair = _pair(size)
    if pair is None:
        return None
    me, n = pair[0].rank(), pair[0].size()
    dist.barrier(group=pair[1])
    if me == n - 1:
        time.sleep(1.0)
    out, works = {}, []
    for name, g in zip(BACKENDS, pair):
        sp = torch.sparse_coo_tensor([[me, n]], [1.0 + me, 2.0], (n + 1,))
        t0 = time.monotonic()
        works.append(dist.all_reduce(sp, group=g, async_op=True))
        out[name] = (time.monotonic() - t0, sp)
    for w in works:
        w.wait()
    return {name: (returned, sp.to_dense().tolist()) for name, (returned, sp) in out.items()}


def _new_pair(size, timeout_s=60.0):
    """A fresh (pycollect, Gloo) pair of groups over ranks [0, size): every rank calls it."""
    tb.register()
    td = datetime.timedelta(seconds=timeout_s)
    return [dist.new_group(list(range(size)), backend=b, timeout=td) for b in BACKENDS]


def case_timeout_then_failed_group(size):
    """Fresh groups with a 5 s timeout, set to 0.3 s by pg.set_timeout (ProcessGroup's
    setTimeout, on each backend): rank 0's all-reduce that nobody joins times out then;
    then every rank's barrier and all-reduce on the failed group raise, each of the same
    type. Also what torch's _set_pg_timeout does (it handles Gloo and NCCL only)."""
    groups = _new_pair(size, timeout_s=5.0)
    if dist.get_rank() >= size:
        return None
    out = {}
    for name, g in zip(BACKENDS, groups):
        me = g.rank()
        dist.all_reduce(torch.ones(2), group=g)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dist.distributed_c10d._set_pg_timeout(datetime.timedelta(seconds=0.3), g)
        r = {"_set_pg_timeout warns": [str(w.message) for w in caught],
             "set_timeout": _error(lambda: g.set_timeout(datetime.timedelta(seconds=0.3)))}
        if me == 0:
            t0 = time.monotonic()
            r["alone"] = _error(lambda: dist.all_reduce(torch.ones(2), group=g))
            r["alone_s"] = time.monotonic() - t0
        else:
            time.sleep(0.6 if r["set_timeout"] is None else 5.5)
        r["barrier"] = _error(lambda: dist.barrier(group=g))
        r["all_reduce"] = _error(lambda: dist.all_reduce(torch.ones(2), group=g))
        out[name] = r
        time.sleep(0.3)  # every rank saw this backend's failure before the next one starts
    for g in groups:
        dist.destroy_process_group(g)
    return out


DEVICE_MAPS = {  # pycollect's maps, and the same with Gloo in pycollect's place
    "cpu:gloo,cuda:pycollect": "cpu:gloo,cuda:gloo",
    "cpu:pycollect,cuda:gloo": "cpu:gloo,cuda:gloo",
    "cpu:pycollect,cuda:nccl": "cpu:gloo,cuda:nccl",
}


def case_device_maps(size):
    """init's device maps as new_group's backend strings, each beside the same with Gloo:
    which backend serves each device, an all-reduce of CPU tensors and the engine's calls
    meanwhile; or what creating the group raised (torch has no NCCL here), and whether an
    engine group it formed before was left behind."""
    import gc

    from pycollect.torch_backend import native

    tb.register()
    out = {}
    for spec in dict.fromkeys(s for pair in DEVICE_MAPS.items() for s in pair):
        engines = len(native._engines)
        try:
            g = dist.new_group(list(range(size)), backend=spec)
        except Exception as e:  # noqa: BLE001 - compared with Gloo's
            out[spec] = dict(created=(type(e).__name__, str(e)))
        else:
            out[spec] = {}
            if dist.get_rank() < size:
                ours = tb.is_backend(g)
                before = _calls(g) if ours else None
                t = torch.full((3,), float(g.rank() + 1))
                dist.all_reduce(t, group=g)
                out[spec] = dict(devices={d: g._get_backend(torch.device(d)).name() for d in ("cpu", "cuda")},
                                 sum=t.tolist(), engine_calls=dict(_calls(g) - before) if ours else None,
                                 name=g.name())
            dist.destroy_process_group(g)
            del g
        gc.collect()  # the failed creation's frames, and the backends they held
        out[spec]["engines_left"] = len(native._engines) - engines
    return out if dist.get_rank() < size else None


def case_debug_detail(size):
    """TORCH_DISTRIBUTED_DEBUG=DETAIL (torch's debug level while the groups are made): the
    backend torch holds for CPU tensors, a right all-reduce, and an all-reduce whose shapes
    differ by rank (the wrapper's check), on both backends."""
    from torch.distributed import DebugLevel

    was = dist.get_debug_level()
    dist.set_debug_level(DebugLevel.DETAIL)
    try:
        groups = _new_pair(size)
    finally:
        dist.set_debug_level(was)
    if dist.get_rank() >= size:
        for g in groups:
            dist.destroy_process_group(g)
        return None
    out = {}
    for name, g in zip(BACKENDS, groups):
        me = g.rank()
        before = _calls(g) if name == "pycollect" else None
        t = torch.full((3,), float(me + 1))
        dist.all_reduce(t, group=g)
        bad = _error(lambda: dist.all_reduce(torch.ones(3 + me), group=g))
        after = torch.full((2,), float(me))
        dist.all_reduce(after, group=g)
        out[name] = dict(wrapper=type(_native(g)).__name__, sum=t.tolist(), after=after.tolist(),
                         mismatch=None if bad is None else (bad[0], "Detected mismatch between collectives" in bad[1]),
                         engine_calls=None if before is None else dict(_calls(g) - before))
    for g in groups:
        dist.destroy_process_group(g)
    return out
