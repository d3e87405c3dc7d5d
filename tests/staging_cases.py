"""Worker-side functions for tests/test_staging.py: the staged (device) path driven by
the engine's host device, checked against the plain path and Gloo on the same inputs.

Each case makes its own group with ProcessGroup.use_host_device (CPU tensors then take
the path CUDA tensors take: cut into pieces, copied through pinned slots by stream
threads), runs the call there and on the default groups, and returns a digest of the
staged result so the test can check that every rank holds the same bytes.
"""
from __future__ import annotations

import hashlib
import time

import torch
import torch.distributed as dist

import pycollect as pc
from collective_cases import TOL, make_input

PIECE_BYTES = 256  # the pool's PYCOLLECT_STAGING_BYTES: 64 float32 per piece


def _host_group(copy_delay_us: int = 0, fail_copy: int = 0):
    g = pc.new_group()
    g.use_host_device(copy_delay_us, fail_copy)
    return g


def _digest(*tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _same(a: torch.Tensor, b: torch.Tensor, dtype, what: str) -> None:
    if dtype.is_floating_point:
        rtol, atol = TOL[dtype]
        torch.testing.assert_close(a.double(), b.double(), rtol=rtol, atol=atol, msg=what)
    else:
        assert torch.equal(a, b), f"{what}: {a[:8]} != {b[:8]}"


def _torch_op(op: str):
    return {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
            "MAX": dist.ReduceOp.MAX, "AVG": dist.ReduceOp.AVG}[op]


def _run_kind(kind: str, g, inputs, op: str, engine: str):
    """Runs `kind` on `inputs` (this rank's, cloned) through pycollect group `g` or Gloo;
    returns the tensors it produced."""
    rank, n = dist.get_rank(), dist.get_world_size()
    x = inputs[rank].clone()
    count = x.numel()
    tops = _torch_op(op) if op != "AVG" else None
    kind, _, algo = kind.partition(":")  # "all_reduce:tree": that algorithm on both engine paths
    if kind == "all_reduce":
        if engine == "gloo":
            if op == "AVG":
                dist.all_reduce(x)
                x = (x.double() / n).to(x.dtype)
            else:
                dist.all_reduce(x, op=tops)
        else:
            pc.all_reduce(x, op=op, group=g, algo=algo or None)
        return [x]
    if kind == "broadcast":
        (dist.broadcast if engine == "gloo" else pc.broadcast)(x, 1, **({} if engine == "gloo" else {"group": g}))
        return [x]
    if kind == "reduce":
        if engine == "gloo":
            dist.reduce(x, 0, op=tops)
        else:
            pc.reduce(x, 0, op=op, group=g)
        return [x] if rank == 0 else [x]
    if kind == "all_gather_into_tensor":
        out = torch.empty(n * count, dtype=x.dtype)
        if engine == "gloo":
            dist.all_gather_into_tensor(out, x)
        else:
            pc.all_gather_into_tensor(out, x, group=g, algo=algo or None)
        return [out]
    if kind == "all_gather":
        outs = [torch.empty(count, dtype=x.dtype) for _ in range(n)]
        if engine == "gloo":
            dist.all_gather(outs, x)
        else:
            pc.all_gather(outs, x, group=g, algo=algo or None)
        return outs
    if kind == "reduce_scatter_tensor":
        big = torch.cat([inputs[rank]] * n) + rank  # n chunks of `count`
        out = torch.empty(count, dtype=x.dtype)
        if engine == "gloo":
            # Gloo has no reduce_scatter: the reference is all_reduce + our chunk.
            dist.all_reduce(big, op=tops)
            out.copy_(big[rank * count:(rank + 1) * count])
        else:
            pc.reduce_scatter_tensor(out, big, op=op, group=g)
        return [out]
    if kind == "reduce_scatter":
        parts = [inputs[rank] + k for k in range(n)]
        out = torch.empty(count, dtype=x.dtype)
        if engine == "gloo":
            big = torch.cat(parts)
            dist.all_reduce(big, op=tops)
            out.copy_(big[rank * count:(rank + 1) * count])
        else:
            pc.reduce_scatter(out, parts, op=op, group=g)
        return [out]
    raise ValueError(kind)


def case_staging_matches(kind: str, dtype, op: str, counts, copy_delay_us: int = 0):
    """Every count of `counts`: staged == plain == Gloo (within the suite's tolerances)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    g = _host_group(copy_delay_us)
    try:
        digests = []
        before = g._comm.staged_pieces()
        for seed, count in enumerate(counts):
            inputs = [make_input(dtype, count, r, seed, op) for r in range(n)]
            staged = _run_kind(kind, g, inputs, op, "pycollect")
            plain = _run_kind(kind, None, inputs, op, "pycollect")
            gloo = _run_kind(kind, None, inputs, op, "gloo") if op != "AVG" or kind == "all_reduce" else plain
            for s, p, gl in zip(staged, plain, gloo):
                what = f"{kind} {dtype} {op} count={count} rank {rank}"
                if kind == "reduce" and rank != 0:
                    assert torch.equal(s, inputs[rank]), f"{what}: a non-root's tensor changed"
                    continue
                _same(s, p, dtype, what + " staged vs plain")
                _same(s, gl, dtype, what + " staged vs gloo")
            digests.append(_digest(*staged) if kind != "reduce" else "")
        pieces = g._comm.staged_pieces() - before
        return digests, pieces, g._comm.staging_pinned_bytes()
    finally:
        pc.destroy_process_group(g)


def case_staging_async_order(count: int, copy_delay_us: int):
    """Back-to-back async all-reduces on different tensors, with slow copies: each result
    is its own (no piece of one call lands in another's tensor)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    g = _host_group(copy_delay_us)
    try:
        xs = [torch.full((count,), float(k * 10 + rank)) for k in range(4)]
        works = [pc.all_reduce(x, group=g, async_op=True) for x in xs]
        for w in works:
            w.wait()
        for k, x in enumerate(xs):
            want = float(sum(k * 10 + r for r in range(n)))
            assert torch.all(x == want), f"call {k}: {x[:4]} != {want}"
        return _digest(*xs)
    finally:
        pc.destroy_process_group(g)


def case_staging_waits_for_caller_stream(count: int):
    """Work queued on the caller's stream before the call (a slow fill) is seen by it."""
    rank, n = dist.get_rank(), dist.get_world_size()
    g = _host_group()
    try:
        x = torch.zeros(count, dtype=torch.uint8)
        pc.all_reduce(x, group=g)  # makes the host device
        g._comm.host_device_fill(x.data_ptr(), count, rank + 1, 100_000)  # 0.1 s, then fill
        pc.all_reduce(x, group=g)
        want = sum(r + 1 for r in range(n))
        assert torch.all(x == want), f"{x[:8]} != {want}: the call did not wait for the caller's stream"
        return int(x[0])
    finally:
        pc.destroy_process_group(g)


def case_staging_copy_failure(count: int, fail_copy: int):
    """Rank 0's `fail_copy`-th copy fails mid-way: every rank gets an error, quickly."""
    rank = dist.get_rank()
    g = _host_group(copy_delay_us=100, fail_copy=fail_copy if rank == 0 else 0)
    t0 = time.monotonic()
    try:
        x = torch.ones(count)
        try:
            pc.all_reduce(x, group=g)
        except pc.PyCollectError as e:
            return type(e).__name__, str(e), time.monotonic() - t0, g._comm.failed()
        return "no error", "", time.monotonic() - t0, g._comm.failed()
    finally:
        pc.destroy_process_group(g)


def case_staging_irregular(count: int):
    """gather, scatter, all_to_all, the coalesced calls and send/recv through the host
    staging of _device.py: same results as the plain path."""
    rank, n = dist.get_rank(), dist.get_world_size()
    g = _host_group()
    try:
        results = {}
        x = torch.arange(count, dtype=torch.float32) + 100 * rank
        # gather to 0
        outs = [torch.empty(count) for _ in range(n)] if rank == 0 else None
        pc.gather(x, outs, dst=0, group=g)
        if rank == 0:
            for r in range(n):
                assert torch.equal(outs[r], torch.arange(count, dtype=torch.float32) + 100 * r), "gather"
        # scatter from 1
        got = torch.empty(count)
        src = [torch.full((count,), float(r + 7)) for r in range(n)] if rank == 1 else None
        pc.scatter(got, src, src=1, group=g)
        assert torch.all(got == rank + 7), "scatter"
        # all_to_all
        ins = [torch.full((count,), float(rank * 10 + p)) for p in range(n)]
        outs2 = [torch.empty(count) for _ in range(n)]
        pc.all_to_all(outs2, ins, group=g)
        for p in range(n):
            assert torch.all(outs2[p] == p * 10 + rank), "all_to_all"
        # coalesced all-reduce (in place) and all-gather
        ts = [torch.full((count,), float(rank + 1)), torch.full((count + 1,), float(2 * rank))]
        pc.all_reduce_coalesced(ts, group=g)
        assert torch.all(ts[0] == sum(r + 1 for r in range(n))) and torch.all(ts[1] == sum(2 * r for r in range(n)))
        rows = [[torch.empty(count), torch.empty(2)] for _ in range(n)]
        pc.all_gather_coalesced(rows, [x, torch.full((2,), float(rank))], group=g)
        for r in range(n):
            assert torch.all(rows[r][1] == r) and torch.equal(rows[r][0], torch.arange(count, dtype=torch.float32) + 100 * r)
        # send / recv around the ring, then a recv from any source
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        r_buf = torch.empty(count)
        w = pc.isend(x, g.ranks[nxt], group=g)
        pc.recv(r_buf, g.ranks[prv], group=g)
        w.wait()
        assert torch.equal(r_buf, torch.arange(count, dtype=torch.float32) + 100 * prv), "send/recv"
        if rank == 1:
            pc.send(x, 0, group=g, tag=5)
        if rank == 0:
            any_buf = torch.empty(count)
            who = pc.recv(any_buf, None, group=g, tag=5)
            assert who == 1 and torch.equal(any_buf, torch.arange(count, dtype=torch.float32) + 100), "recv any"
        results["pieces"] = g._comm.staged_pieces()
        return results
    finally:
        pc.destroy_process_group(g)


def case_staging_cuda_missing():
    """Without a GPU the engine's CUDA device cannot load: a clear DeviceError, raised
    before anything is sent (the group goes on working)."""
    g = pc.new_group()
    try:
        x = torch.ones(8)
        try:
            g._comm.all_reduce_staged(x.data_ptr(), 8, 0, 0, 0, 0, 0)
        except pc.DeviceError as e:
            message = str(e)
        else:
            message = ""
        pc.all_reduce(x, group=g)  # still in step with the other ranks
        return message, float(x[0]), g._comm.failed()
    finally:
        pc.destroy_process_group(g)


def case_staging_cut_mismatch(count: int):
    """Ranks that cut differently (different PYCOLLECT_STAGING_BYTES) get a MismatchError
    naming the piece counts, not mixed bytes or a hang."""
    import os

    rank = dist.get_rank()
    saved = os.environ.get("PYCOLLECT_STAGING_BYTES")
    os.environ["PYCOLLECT_STAGING_BYTES"] = str(PIECE_BYTES * (rank + 1))
    try:
        g = _host_group()
    finally:
        os.environ["PYCOLLECT_STAGING_BYTES"] = saved
    try:
        pc.all_reduce(torch.ones(count), group=g)
    except pc.PyCollectError as e:
        return type(e).__name__, str(e)
    finally:
        pc.destroy_process_group(g)
    return "no error", ""


def case_staging_abort_while_copying():
    """A staged call waiting on slow copies stops soon after the group is aborted (the
    poll asks for the group's failure), on every rank."""
    rank = dist.get_rank()
    g = _host_group(copy_delay_us=300_000)  # every copy takes 0.3 s
    t0 = time.monotonic()
    try:
        w = pc.all_reduce(torch.ones(20 * (PIECE_BYTES // 4)), group=g, async_op=True)  # 20 pieces: > 12 s
        if rank == 0:
            time.sleep(0.5)
            g.abort("test: aborted while copying")
        try:
            w.wait(timeout=30)
        except pc.PyCollectError as e:
            return type(e).__name__, str(e), time.monotonic() - t0
        return "no error", "", time.monotonic() - t0
    finally:
        pc.destroy_process_group(g)


# -- host-free wait(): the caller's stream waits, the host does not ----------------------
def _stream_group(copy_delay_us: int = 0, fail_copy: int = 0):
    """A host-device group whose wait() behaves as on CUDA: stream 0 (the caller's) waits."""
    g = pc.new_group()
    g.use_host_device(copy_delay_us, fail_copy, stream_wait=True)
    return g


def _through_stream(g, x: torch.Tensor) -> torch.Tensor:
    """x as work queued now on the caller's stream sees it: a copy queued there, then the
    host waits for the stream (what .cpu() does on CUDA)."""
    y = torch.empty_like(x)
    g._comm.host_device_snapshot(y.data_ptr(), x.data_ptr(), x.numel() * x.element_size())
    g._comm.host_device_synchronize()
    return y


def case_staging_wait_is_host_free(count: int, copy_delay_us: int):
    """wait() (of a blocking call, and of async_op + wait) returns while the copies are still
    in flight; a copy queued afterwards on the caller's stream reads the final result, and
    a fill queued afterwards is not overwritten by the call's late copies."""
    rank, n = dist.get_rank(), dist.get_world_size()
    g = _stream_group(copy_delay_us)
    try:
        out = {}
        x = torch.full((count,), float(rank + 1))
        want = float(sum(r + 1 for r in range(n)))
        t0 = time.monotonic()
        pc.all_reduce(x, group=g)  # a blocking call: its wait is the stream's
        out["returned"] = time.monotonic() - t0
        out["host_saw_old"] = bool(torch.all(x == rank + 1))  # the copies back had not run yet
        y = _through_stream(g, x)
        out["total"] = time.monotonic() - t0
        out["exact"] = bool(torch.all(y == want))
        g._comm.host_device_fill(x.data_ptr(), x.numel() * 4, 0, 0)  # queued behind: wins
        w = pc.all_reduce(x, group=g, async_op=True)  # 0s + 0s
        t1 = time.monotonic()
        w.wait()
        out["async_returned"] = time.monotonic() - t1
        out["pending_after_wait"] = not w.is_completed()
        g._comm.host_device_fill(x.data_ptr(), x.numel() * 4, 7, 0)  # after the result: stays
        z = _through_stream(g, x)
        out["fill_after"] = bool(torch.all(z.view(torch.uint8) == 7))
        out["completed_after_sync"] = w.is_completed() and w.exception() is None
        out["digest"] = _digest(y)
        return out
    finally:
        pc.destroy_process_group(g)


def case_staging_blocking_wait(count: int, copy_delay_us: int):
    """wait(blocking=True) and PYCOLLECT_BLOCKING_WAIT=1 block the host until the result is
    in the tensor, as before."""
    import os

    rank, n = dist.get_rank(), dist.get_world_size()
    want = float(sum(r + 1 for r in range(n)))
    out = {}
    g = _stream_group(copy_delay_us)
    try:
        x = torch.full((count,), float(rank + 1))
        w = pc.all_reduce(x, group=g, async_op=True)
        w.wait(blocking=True)
        out["blocking_arg"] = bool(torch.all(x == want)) and w.is_completed()
    finally:
        pc.destroy_process_group(g)
    os.environ["PYCOLLECT_BLOCKING_WAIT"] = "1"
    try:
        g = _stream_group(copy_delay_us)
    finally:
        del os.environ["PYCOLLECT_BLOCKING_WAIT"]
    try:
        x = torch.full((count,), float(rank + 1))
        pc.all_reduce(x, group=g)
        out["env"] = bool(torch.all(x == want))
    finally:
        pc.destroy_process_group(g)
    return out


def case_staging_host_free_copy_failure(count: int, fail_copy: int):
    """Rank 0's `fail_copy`-th copy fails after a non-blocking wait returned: the caller's
    stream does not hang, and every rank learns of the error within seconds, from
    exception() (rank 0) and from its next call (every rank)."""
    rank = dist.get_rank()
    g = _stream_group(copy_delay_us=100, fail_copy=fail_copy if rank == 0 else 0)
    t0 = time.monotonic()
    try:
        out = {}
        x = torch.ones(count)
        w = pc.all_reduce(x, group=g, async_op=True)
        w.wait()  # returns; the failure comes later
        out["wait_returned"] = time.monotonic() - t0
        g._comm.host_device_synchronize()  # the caller's stream goes on
        out["stream_went_on"] = time.monotonic() - t0
        while not w.is_completed() and time.monotonic() - t0 < 10:
            time.sleep(0.01)
        err = w.exception()
        out["exception"] = (type(err).__name__, str(err)) if err is not None else None
        out["group_failed"] = g._comm.failed()  # at once, not only after a later call
        try:
            pc.all_reduce(torch.ones(count), group=g)
            g._comm.host_device_synchronize()
            pc.all_reduce(torch.ones(4), group=g)  # the group has failed by now, on every rank
            out["next_call"] = ("no error", "")
        except pc.PyCollectError as e:
            out["next_call"] = (type(e).__name__, str(e))
        out["seconds"] = time.monotonic() - t0
        return out
    finally:
        pc.destroy_process_group(g)


def case_staging_dropped_work_keeps_buffers(count: int, copy_delay_us: int):
    """The Work and the tensor dropped right after a non-blocking wait: the group keeps the
    tensor until its copies are done (memory reused meanwhile is not written over), then
    lets it go."""
    import gc
    import weakref

    rank, n = dist.get_rank(), dist.get_world_size()
    g = _stream_group(copy_delay_us)
    try:
        x = torch.full((count,), float(rank + 1))
        gone = weakref.ref(x)
        w = pc.all_reduce(x, group=g, async_op=True)
        w.wait()
        cw = w._cwork  # the engine's handle (holds no tensor), to see where the call is
        del w, x
        while not cw.is_completed():  # over on the host; its last copy back takes 0.1 s more
            time.sleep(0.001)
        pc.all_reduce(torch.zeros(1), group=g)  # a call prunes what the group holds
        in_flight = not cw.device_done()
        held = gone() is not None and in_flight  # (a tensor is freed at once: no gc needed)
        # Tensors of the same size: one would take x's memory if it had been freed.
        others = [torch.full((count,), -1.0) for _ in range(8)]
        g._comm.host_device_synchronize()  # the call's copies are done behind this
        intact = all(bool(torch.all(o == -1.0)) for o in others)
        y = torch.full((4,), float(rank))
        pc.all_reduce(y, group=g)  # a later call lets settled buffers go
        _through_stream(g, y)
        pc.all_reduce(torch.zeros(1), group=g)
        gc.collect()
        return held, intact, gone() is None
    finally:
        pc.destroy_process_group(g)


def case_staging_back_to_back_host_free(calls: int, count: int, start_seq=None):
    """Many calls, each waited on without blocking, of mixed kinds and sizes (slots reused
    and regrown under copies in flight; more calls than flag words): every result exact.
    With `start_seq`, the calls are numbered from there on (across the 32-bit wrap)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    g = _stream_group(copy_delay_us=20)
    try:
        if start_seq is not None:
            pc.all_reduce(torch.zeros(1), group=g)  # makes the staging
            g._comm.host_device_synchronize()
            g._comm.restart_staged_seq(start_seq)
        results = []
        seqs = []
        for k in range(calls):
            size = 1 + (k * 37) % count
            if k % 3 == 2:  # reduce-scatter: a larger slot than all-reduce's
                big = torch.full((n * size,), float(k + rank))
                out = torch.empty(size)
                pc.reduce_scatter_tensor(out, big, group=g)
                results.append((out, float(n * k + sum(range(n)))))
            else:
                x = torch.full((size,), float(k + rank))
                w = pc.all_reduce(x, group=g, async_op=True)
                w.wait()
                seqs.append(w._cwork.seq)
                results.append((x, float(n * k + sum(range(n)))))
        g._comm.host_device_synchronize()
        bad = [k for k, (t, want) in enumerate(results) if not bool(torch.all(t == want))]
        return bad, (seqs[0], seqs[-1])
    finally:
        pc.destroy_process_group(g)


def case_device_torch_backend_wait_is_host_free(count: int, copy_delay_us: int):
    """The torch backend's Work (both its inline and its completer path): wait() makes the
    caller's stream wait and returns while the copies are in flight."""
    import pycollect.torch_backend as tb

    rank, n = dist.get_rank(), dist.get_world_size()
    tb.register()
    pg = dist.new_group(backend="pycollect")
    eg = tb.engine_group(pg)
    eg.use_host_device(copy_delay_us, 0, stream_wait=True)
    try:
        out = {}
        want = float(sum(r + 1 for r in range(n)))
        for name, size in (("small", 16), ("large", count)):
            x = torch.full((size,), float(rank + 1))
            t0 = time.monotonic()
            w = dist.all_reduce(x, group=pg, async_op=True)
            w.wait()
            returned = time.monotonic() - t0
            y = _through_stream(eg, x)
            out[name] = (returned, time.monotonic() - t0, bool(torch.all(y == want)))
        w.get_future().wait()  # the completer settles the Future once the result is in place
        out["future"] = bool(torch.all(x == want))
        return out
    finally:
        dist.destroy_process_group(pg)


# -- the CUDA path's fixes, each reproduced through the host device ----------------------
def case_device_list_all_gather_wait(copy_delay_us: int):
    """The list form of all-gather fills its list in a finish step. After a host-free
    wait(), on the engine (pc.all_gather) and through the torch backend (dist.all_gather,
    async and not), the list holds the result at once: on the host, and for work queued
    on the caller's stream. Then torch DDP's constructor on the backend group, which
    all-gathers the parameter count and reads it with .item() (it raised "DDP expects
    same model" when the finish step ran later)."""
    import pycollect.torch_backend as tb
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as TorchDDP

    rank, n = dist.get_rank(), dist.get_world_size()
    want = [torch.full((PIECE_BYTES // 4 + 3,), float(r + 1)) for r in range(n)]
    out = {}
    g = _stream_group(copy_delay_us)
    try:
        outs = [torch.zeros_like(want[0]) for _ in range(n)]
        w = pc.all_gather(outs, want[rank].clone(), group=g, async_op=True)
        w.wait()
        out["engine_host"] = all(torch.equal(o, x) for o, x in zip(outs, want))
        out["engine_stream"] = all(torch.equal(_through_stream(g, o), x) for o, x in zip(outs, want))
    finally:
        pc.destroy_process_group(g)
    tb.register()
    pg = dist.new_group(backend="pycollect")
    eg = tb.engine_group(pg)
    eg.use_host_device(copy_delay_us, 0, stream_wait=True)
    try:
        for mode in ("async", "blocking"):
            outs = [torch.zeros_like(want[0]) for _ in range(n)]
            if mode == "async":
                dist.all_gather(outs, want[rank].clone(), group=pg, async_op=True).wait()
            else:
                dist.all_gather(outs, want[rank].clone(), group=pg)
            out[f"backend_{mode}_host"] = all(torch.equal(o, x) for o, x in zip(outs, want))
            out[f"backend_{mode}_stream"] = all(torch.equal(_through_stream(eg, o), x) for o, x in zip(outs, want))
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        try:
            TorchDDP(model, process_group=pg)
            eg._comm.host_device_synchronize()  # the broadcast's copies, as a stream sync would
            out["ddp"] = "ok"
        except Exception as e:  # noqa: BLE001 - the test shows it
            out["ddp"] = f"{type(e).__name__}: {str(e)[:300]}"
        return out
    finally:
        dist.destroy_process_group(pg)


def case_staging_larger_call_after_reduce_scatter(copy_delay_us: int):
    """A small reduce-scatter, then a larger all-reduce, each waited on host-free while the
    worker is still busy: the caller's stream already waits on the all-reduce's flag word
    when the worker starts it. A slot grown then (cuMemFreeHost: a device synchronise,
    which the host device models) would wait for that stream: a deadlock on a GPU."""
    rank, n = dist.get_rank(), dist.get_world_size()
    g = _stream_group(copy_delay_us)
    t0 = time.monotonic()
    try:
        small = torch.full((n * 2,), float(rank + 1))
        part = torch.empty(2)
        w1 = pc.reduce_scatter_tensor(part, small, group=g, async_op=True)
        w1.wait()
        big = torch.full((3 * PIECE_BYTES // 4,), float(rank + 1))
        w2 = pc.all_reduce(big, group=g, async_op=True)
        w2.wait()
        total = float(sum(r + 1 for r in range(n)))
        ok = bool(torch.all(_through_stream(g, part) == total)) and bool(torch.all(_through_stream(g, big) == total))
        err = w2.exception() or w1.exception()
        return {"exact": ok, "error": None if err is None else f"{type(err).__name__}: {err}",
                "seconds": time.monotonic() - t0, "pinned": g._comm.staging_pinned_bytes()}
    except pc.PyCollectError as e:
        return {"exact": False, "error": f"{type(e).__name__}: {e}", "seconds": time.monotonic() - t0}
    finally:
        pc.destroy_process_group(g)


def case_staging_sticky_error_names_the_call(fail_copy: int):
    """Rank 0's device fails a copy with a sticky error (every later device call fails
    too, as on CUDA): the error raised still names the call and the failed copy."""
    rank = dist.get_rank()
    g = pc.new_group()
    g.use_host_device(100, fail_copy if rank == 0 else 0, sticky_errors=True)
    try:
        pc.all_reduce(torch.ones(20 * (PIECE_BYTES // 4)), group=g)
        return "no error", ""
    except pc.PyCollectError as e:
        return type(e).__name__, str(e)
    finally:
        pc.destroy_process_group(g)


def case_staging_without_flag_words(copy_delay_us: int):
    """A device that cannot make the flag words (cuMemHostAlloc refused): staging still
    works, and wait() blocks the host instead (with a warning), so the result is in place
    when it returns."""
    import warnings

    rank, n = dist.get_rank(), dist.get_world_size()
    g = pc.new_group()
    g.use_host_device(copy_delay_us, 0, stream_wait=True, fail_flags=True)
    try:
        x = torch.full((3 * PIECE_BYTES // 4,), float(rank + 1))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            w = pc.all_reduce(x, group=g, async_op=True)
            w.wait()
        return {"exact": bool(torch.all(x == float(sum(r + 1 for r in range(n))))),
                "warned": any("blocks the host" in str(c.message) for c in caught)}
    finally:
        pc.destroy_process_group(g)


def case_staging_streams_destroyed():
    """A group's staging destroys the copy streams it made (cuStreamDestroy) when it ends."""
    from pycollect import _C

    before = _C.host_device_stream_counts()
    g = _host_group()
    pc.all_reduce(torch.ones(8), group=g)
    made = _C.host_device_stream_counts()
    pc.destroy_process_group(g)
    after = _C.host_device_stream_counts()
    return made[0] - before[0], after[1] - before[1]


def case_staging_stream_wait_in_forked_child():
    """A forked child that waits on its parent's CUDA call (its Work inherited) gets the
    fork refusal, not a wait queued on the parent's device."""
    import os

    g = _stream_group(copy_delay_us=50_000)
    try:
        w = pc.all_reduce(torch.ones(3 * PIECE_BYTES // 4), group=g, async_op=True)
        r, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report and leave at once, touching nothing else
            try:
                w._cwork.stream_wait(0)
                msg = "no error"
            except BaseException as e:  # noqa: BLE001
                msg = f"{type(e).__name__}: {e}"
            os.write(wfd, msg.encode()[:4000])
            os._exit(0)
        os.close(wfd)
        got = os.read(r, 4096).decode()
        os.close(r)
        os.waitpid(pid, 0)
        w.wait(blocking=True)
        return got
    finally:
        pc.destroy_process_group(g)
