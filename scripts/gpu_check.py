"""The GPU check, as one plain Python program (no pytest needed).

    python3 scripts/gpu_check.py                 # on a machine with a GPU (2 ranks on cuda:0)
    python3 scripts/gpu_check.py --dry-run       # anywhere: the same steps on CPU tensors staged
                                                 # through the engine's host device, tiny sizes

Steps, in this order, each in its own process with its own time limit (a step that hangs
or fails is reported as FAIL and the next one runs), each printing one PASS / FAIL / SKIP
line and adding its results to gpu_check.json as it ends:
  smoke           one all-reduce on CUDA tensors, group timeout 10 s: the engine works at all
  correctness     every collective and point-to-point call x dtypes x ops x sizes (0, 1,
                  uneven, several staged pieces) on CUDA tensors, against a float64/int64
                  CPU reference and Gloo on the same tensors, bit-identical across ranks;
                  stream order (a result includes work queued on the caller's stream before
                  the call) and the host-free wait (wait() returns while the call runs; a
                  kernel queued after it sees the result; wait(blocking=True) returns with it)
  torch_backend   the "pycollect" torch backend on CUDA tensors: dist.all_gather (list form)
                  filled when wait() returns, torch DDP's constructor (its parameter check)
  training        one step of pycollect DDP, pycollect FSDP and torch DDP on the backend on a
                  GPU model, against torch DDP over Gloo and against the same steps on CPU
  max_connections CUDA_DEVICE_MAX_CONNECTIONS=1: wait() blocks the host, results exact
  nccl            NCCL with 2 ranks on one GPU (known to refuse: its message), then NCCL at
                  world size 1 against pycollect's staging cost at world size 1
  bench           all_reduce 1 MiB - 256 MiB on CUDA tensors, pycollect vs Gloo in the same
                  run, and pycollect on CPU tensors; one table (targets reported, not enforced)
With $OUT (or --out) set, writes gpu_check.json (after every step) and gpu_check.txt (the
benchmark table) there. Exit status: 0 when every step passed or was skipped, 1 otherwise.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import multiprocessing as mp
import os
import queue
import signal
import statistics
import sys
import time

STAGING_BYTES = 1 << 20  # small, so the larger sizes cross several pieces
DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64"]
TOL = {"float32": (1e-5, 1e-5), "float64": (1e-12, 1e-12), "float16": (1e-2, 2e-2), "bfloat16": (2e-2, 1e-1)}
REDUCING = {"all_reduce": ["SUM", "PRODUCT", "MIN", "MAX", "AVG"], "reduce": ["SUM", "MAX"],
            "reduce_scatter_tensor": ["SUM", "MIN"], "all_reduce_coalesced": ["SUM"]}
MOVING = ["broadcast", "all_gather_into_tensor", "all_gather_bruck", "all_gather", "gather", "scatter", "all_to_all",
          "send_recv"]
SAME_EVERYWHERE = {"all_reduce", "broadcast", "all_gather_into_tensor", "all_gather_bruck", "all_gather",
                   "all_reduce_coalesced"}
STEPS = ("smoke", "correctness", "torch_backend", "training", "max_connections", "nccl", "bench")
SMOKE_TIMEOUT_S = 10.0  # the smoke step's group timeout


def _counts(dry: bool):
    big = 3 * STAGING_BYTES // 4 + 5 if not dry else 300  # float32: 4 pieces (dry: several 256 B pieces)
    return [0, 1, 4099 if not dry else 67, big]


def plan(dry: bool):
    for kind, ops in REDUCING.items():
        for dtype in DTYPES:
            for op in ops:
                if op == "AVG" and not dtype.startswith(("float", "bfloat")):
                    continue
                for count in _counts(dry):
                    yield kind, dtype, op, count
    for kind in MOVING:
        for dtype in DTYPES:
            for count in _counts(dry):
                yield kind, dtype, "SUM", count


def _hang_if(step: str, hang) -> None:
    """Tests of this script: the step named by --hang never ends (its limit must hold)."""
    if hang == step:
        time.sleep(10 ** 6)


def _setup(dry: bool, group=None):
    """The device every rank job uses: cuda:0, or (dry run) CPU tensors on the host device."""
    import torch

    if dry:
        from pycollect import api

        (group or api._default()).use_host_device()
        return "cpu"
    torch.cuda.set_device(0)
    return "cuda:0"


# -- worker side -----------------------------------------------------------------------
def _input(torch, dtype, count, rank, seed, op):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    t = getattr(torch, dtype)
    if t.is_floating_point:
        x = torch.rand(count, generator=g, dtype=torch.float64)
        x = x + 0.5 if op == "PRODUCT" else x * 2 - 1
        return x.to(t)
    lo, hi = (1, 3) if op == "PRODUCT" else (0, 30)
    return torch.randint(lo, hi, (count,), generator=g, dtype=torch.int64).to(t)


def _wide(torch, x):
    return x.cpu().to(torch.float64 if x.is_floating_point() else torch.int64)


def _reduce(torch, xs, op):
    w = torch.stack([_wide(torch, x) for x in xs])
    if op == "SUM":
        return w.sum(0)
    if op == "PRODUCT":
        return w.prod(0)
    if op == "MIN":
        return w.min(0).values
    if op == "MAX":
        return w.max(0).values
    return w.mean(0)


def _pc_call(pc, torch, kind, xs, op, rank, n, dev):
    """pycollect on device tensors; returns (outputs, references) as lists of tensors."""
    mine = xs[rank].to(dev, copy=True)  # never the reference input itself
    count = mine.numel()
    if kind == "all_reduce":
        pc.all_reduce(mine, op=op)
        return [mine], [_reduce(torch, xs, op)]
    if kind == "reduce":
        pc.reduce(mine, 0, op=op)
        return [mine], [_reduce(torch, xs, op) if rank == 0 else _wide(torch, xs[rank])]
    if kind == "reduce_scatter_tensor":
        bigs = [torch.cat([xs[(r + k) % n] for k in range(n)]) for r in range(n)]  # rank r's input
        out = torch.empty(count, dtype=mine.dtype, device=dev)
        pc.reduce_scatter_tensor(out, bigs[rank].to(dev), op=op)
        return [out], [_reduce(torch, bigs, op)[rank * count:(rank + 1) * count]]
    if kind == "all_reduce_coalesced":
        ts = [mine, (mine[: count // 2] + 1) if count else mine.clone()]
        pc.all_reduce_coalesced(ts, op=op)
        second = [(x[: count // 2] + 1) if count else x for x in xs]
        return ts, [_reduce(torch, xs, op), _reduce(torch, second, op)]
    if kind == "broadcast":
        pc.broadcast(mine, 1)
        return [mine], [_wide(torch, xs[1])]
    if kind in ("all_gather_into_tensor", "all_gather_bruck"):
        out = torch.empty(n * count, dtype=mine.dtype, device=dev)
        pc.all_gather_into_tensor(out, mine, algo="bruck" if kind == "all_gather_bruck" else None)
        return [out], [_wide(torch, torch.cat(xs))]
    if kind == "all_gather":
        outs = [torch.empty(count, dtype=mine.dtype, device=dev) for _ in range(n)]
        pc.all_gather(outs, mine)
        return outs, [_wide(torch, x) for x in xs]
    if kind == "gather":
        outs = [torch.empty(count, dtype=mine.dtype, device=dev) for _ in range(n)] if rank == 0 else None
        pc.gather(mine, outs, dst=0)
        return (outs, [_wide(torch, x) for x in xs]) if rank == 0 else ([], [])
    if kind == "scatter":
        src = [x.to(dev) for x in xs] if rank == 0 else None
        out = torch.empty(count, dtype=mine.dtype, device=dev)
        pc.scatter(out, src, src=0)
        return [out], [_wide(torch, xs[rank])]
    if kind == "all_to_all":
        ins = [mine.clone() for _ in range(n)]  # rank r sends its data to every p
        outs = [torch.empty(count, dtype=mine.dtype, device=dev) for _ in range(n)]
        pc.all_to_all(outs, ins)
        return outs, [_wide(torch, x) for x in xs]
    if kind == "send_recv":
        got = torch.empty(count, dtype=mine.dtype, device=dev)
        peer = (rank + 1) % n
        w = pc.isend(mine, peer)
        pc.recv(got, (rank - 1) % n)
        w.wait()
        return [got], [_wide(torch, xs[(rank - 1) % n])]
    raise ValueError(kind)


def _gloo_call(torch, dist, kind, xs, op, rank, n, dev):
    """Gloo on the same device tensors, for the calls Gloo has (its all-reduce stands in for
    reduce); a list of tensors comparable with _pc_call's, or None (also where this rank has
    nothing to compare). Every rank makes the same Gloo calls."""
    tops = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
            "MAX": dist.ReduceOp.MAX, "AVG": dist.ReduceOp.SUM}
    mine = xs[rank].to(dev, copy=True)  # never the reference input itself
    count = mine.numel()
    if kind in ("all_reduce", "reduce"):
        dist.all_reduce(mine, op=tops[op])
        if kind == "reduce" and rank != 0:
            return None
        return [mine / n if op == "AVG" else mine]
    if kind in ("all_gather_into_tensor", "all_gather_bruck"):
        out = torch.empty(n * count, dtype=mine.dtype, device=dev)
        (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, mine)
        return [out]
    if kind == "broadcast":
        dist.broadcast(mine, 1)
        return [mine]
    return None


def _close(torch, got, ref, dtype):
    g = _wide(torch, got)
    if g.shape != ref.shape:
        return f"shape {tuple(g.shape)} != {tuple(ref.shape)}"
    if dtype in TOL:
        rtol, atol = TOL[dtype]
        bad = (g - ref).abs() > atol + rtol * ref.abs()
    else:
        bad = g != ref
    return f"{int(bad.sum())} of {g.numel()} elements differ" if bool(bad.any()) else ""


def correctness_job(rank, n, emit, dry, hang):
    import torch
    import torch.distributed as dist

    import pycollect as pc

    dev = _setup(dry)
    _hang_if("correctness", hang)
    failures, digests, checked, gloo_checked = [], {}, 0, 0
    for seed, (kind, dtype, op, count) in enumerate(plan(dry)):
        what = f"{kind} {dtype} {op} count={count}"
        xs = [_input(torch, dtype, count, r, seed, op) for r in range(n)]
        try:
            outs, refs = _pc_call(pc, torch, kind, xs, op, rank, n, dev)
            for k, (o, r) in enumerate(zip(outs, refs)):
                why = _close(torch, o, r, dtype)
                if why:
                    failures.append(f"{what} output {k} vs CPU reference: {why}")
            checked += 1
            if kind in SAME_EVERYWHERE:
                digests[what] = hashlib.sha256(b"".join(o.cpu().contiguous().view(torch.uint8).numpy().tobytes()
                                                        for o in outs)).hexdigest()
            if op != "PRODUCT" or dtype.startswith("int"):  # Gloo's fp16 product rounds differently
                gl = _gloo_call(torch, dist, kind, xs, op, rank, n, dev)
                if gl is not None:
                    for o, r in zip(outs, gl):
                        why = _close(torch, o, _wide(torch, r), dtype)
                        if why:
                            failures.append(f"{what} vs Gloo: {why}")
                    gloo_checked += 1
        except Exception as e:  # noqa: BLE001 - reported, then the check goes on
            failures.append(f"{what}: {type(e).__name__}: {e}")
            if isinstance(e, pc.PyCollectError):
                break  # the group failed: later calls cannot run
    stream_ok = "skipped (dry run)"
    host_free = _host_free_check(pc, torch, rank, n, dev, dry)
    if not dry:
        x = torch.zeros(1 << 20, device=dev)
        torch.cuda._sleep(100_000_000)  # ~50 ms of GPU time queued before the fill
        x.fill_(rank + 1)
        pc.all_reduce(x)
        stream_ok = "ok" if bool((x == sum(range(1, n + 1))).all()) else "the call ran before the caller's queued work"
        w = pc.all_reduce(x, async_op=True)
        w.wait()
        if not bool((x == 2 * sum(range(1, n + 1))).all()):
            stream_ok = "async_op + wait() gave a wrong result"
    return {"failures": failures, "digests": digests, "checked": checked, "gloo_checked": gloo_checked,
            "stream": stream_ok, "host_free": host_free}


def _host_free_check(pc, torch, rank, n, dev, dry):
    """wait() without blocking=True makes the current stream wait, and returns before the
    call ends; a kernel queued after it (mul_) sees the exact result. Dry run: the host
    device with its stream-wait mode, read through its stream 0. Returns
    {"ok": bool, "why": str, "returned_s": float, "pending_after_wait": bool}."""
    want = float(sum(range(1, n + 1)))
    count = (32 << 20) // 4 if not dry else 3 * 64  # 32 MiB: many staged pieces (dry: 3)
    g = None
    if dry:
        g = pc.new_group()
        g.use_host_device(100_000, 0, stream_wait=True)  # each copy 0.1 s
    x = torch.full((count,), float(rank + 1), device=dev)
    t0 = time.monotonic()
    w = pc.all_reduce(x, group=g, async_op=True)
    w.wait()
    out = {"returned_s": time.monotonic() - t0, "pending_after_wait": not w.is_completed()}
    if dry:
        y = torch.empty_like(x)
        g._comm.host_device_snapshot(y.data_ptr(), x.data_ptr(), x.numel() * 4)
        g._comm.host_device_synchronize()
    else:
        y = x.mul_(1)  # a kernel on the current stream, after the wait
    why = "" if bool((y == want).all()) else "a kernel queued after the non-blocking wait() saw a wrong result"
    z = torch.full((count,), float(rank + 1), device=dev)
    w = pc.all_reduce(z, group=g, async_op=True)
    w.wait(blocking=True)
    if not (w.is_completed() and bool((z == want).all())):
        why = why or "wait(blocking=True) returned before the result was in place"
    if dry:
        pc.destroy_process_group(g)
    else:
        torch.cuda.synchronize()
    out.update(ok=not why, why=why)
    return out


def smoke_job(rank, n, emit, dry, hang):
    """One all-reduce of 1 MiB on the device: the engine, the driver and staging work at all."""
    import torch

    import pycollect as pc

    dev = _setup(dry)
    _hang_if("smoke", hang)
    x = torch.full(((1 << 20) // 4,), float(rank + 1), device=dev)
    t0 = time.monotonic()
    pc.all_reduce(x)
    exact = bool((x == float(sum(range(1, n + 1)))).all())
    return {"exact": exact, "seconds": time.monotonic() - t0}


def torch_backend_job(rank, n, emit, dry, hang):
    """The torch backend on device tensors: the list form of dist.all_gather is filled when
    wait() returns (async and not), and torch DDP's constructor (an all-gather of the
    parameter count read with .item(), then broadcasts) passes and leaves rank 0's weights."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as TorchDDP

    import pycollect.torch_backend as tb

    tb.register()
    pg = dist.new_group(backend="pycollect")
    dev = _setup(dry, tb.engine_group(pg) if dry else None)
    _hang_if("torch_backend", hang)
    out = {}
    want = [torch.full((4099,), float(r + 1), device=dev) for r in range(n)]
    for mode in ("async", "blocking"):
        outs = [torch.zeros_like(want[0]) for _ in range(n)]
        w = dist.all_gather(outs, want[rank].clone(), group=pg, async_op=(mode == "async"))
        if w is not None:
            w.wait()
        out[f"all_gather list, {mode}"] = all(bool((o == x).all()) for o, x in zip(outs, want))
    torch.manual_seed(11 + rank)  # different weights: the constructor broadcasts rank 0's
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).to(dev)
    try:
        ddp = TorchDDP(model, process_group=pg)
        flat = torch.cat([p.detach().reshape(-1) for p in ddp.module.parameters()]).cpu()
        out["DDP constructor"] = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
    except Exception as e:  # noqa: BLE001 - reported
        out["DDP constructor"] = f"error: {type(e).__name__}: {e}"
    dist.destroy_process_group(pg)
    return out


def max_connections_job(rank, n, emit, dry, hang):
    """Under CUDA_DEVICE_MAX_CONNECTIONS=1 (set by the parent for this step) the group uses
    the blocking wait: the result is in place when wait() returns, on the host."""
    import torch

    import pycollect as pc
    from pycollect import api

    dev = _setup(dry)
    _hang_if("max_connections", hang)
    out = {"blocking_wait": api._default().options.blocking_wait}
    want = float(sum(range(1, n + 1)))
    for count in (1, 4099, 3 * STAGING_BYTES // 4 + 5 if not dry else 300):
        x = torch.full((count,), float(rank + 1), device=dev)
        w = pc.all_reduce(x, async_op=True)
        w.wait()
        out[f"all_reduce {count}: done when wait() returned"] = w.is_completed() and bool((x == want).all())
        outs = [torch.zeros(count, device=dev) for _ in range(n)]
        pc.all_gather(outs, x)
        out[f"all_gather {count}"] = all(bool((o == want).all()) for o in outs)
    return out


def nccl_two_ranks_job(rank, n, emit, dry, hang):
    """NCCL with both ranks on cuda:0 (NCCL is known to refuse): its message."""
    import torch
    import torch.distributed as dist

    _hang_if("nccl", hang)
    torch.cuda.set_device(0)
    try:
        pg = dist.new_group(backend="nccl")
        x = torch.ones(1024, device="cuda:0")
        dist.all_reduce(x, group=pg)
        torch.cuda.synchronize()
        return {"worked": True, "value": float(x[0])}
    except Exception as e:  # noqa: BLE001 - the refusal is the finding
        return {"worked": False, "error": f"{type(e).__name__}: {str(e)[:400]}"}


def nccl_one_rank_job(rank, n, emit, dry, hang, sizes, iters):
    """World size 1 on cuda:0: NCCL's all-reduce (a device-local no-op or copy) against
    pycollect's, which is the cost of staging alone (device -> pinned host -> device)."""
    import torch
    import torch.distributed as dist

    import pycollect as pc

    out = {}
    for size in sizes:
        x = torch.ones(size // 4, device="cuda:0")
        for name, call in (("nccl", lambda: dist.all_reduce(x)), ("pycollect", lambda: pc.all_reduce(x))):
            call()
            torch.cuda.synchronize()
            times = []
            for _ in range(iters):
                t0 = time.perf_counter()
                call()
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            out.setdefault(size, {})[name] = statistics.median(times)
    return out


def training_job(rank, n, emit, dry, hang):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as TorchDDP

    import pycollect as pc
    from pycollect.ddp import DistributedDataParallel
    from pycollect.fsdp import fully_shard

    dev = _setup(dry)
    _hang_if("training", hang)

    def model(where=dev):
        torch.manual_seed(7)
        return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).to(where)

    g = torch.Generator().manual_seed(100 + rank)
    x_cpu, y_cpu = torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
    x, y = x_cpu.to(dev), y_cpu.to(dev)

    def step(m, data=(x, y)):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        opt.zero_grad()
        F.mse_loss(m(data[0]), data[1]).backward()
        opt.step()
        with torch.no_grad():
            return float(F.mse_loss(m(data[0]), data[1]))  # the loss after the step

    ref = TorchDDP(model())  # torch DDP on the default (Gloo) group
    ref_loss = step(ref)
    ref_params = [p.detach().cpu() for p in ref.module.parameters()]
    out = {}
    ours = DistributedDataParallel(model())
    loss_ddp = step(ours)
    diff = max(float((p.detach().cpu() - r).abs().max()) for p, r in zip(ours.module.parameters(), ref_params))
    out["pycollect DDP"] = (abs(loss_ddp - ref_loss), diff)
    fsdp = model()
    fully_shard(fsdp)
    loss_fsdp = step(fsdp)
    out["pycollect FSDP"] = (abs(loss_fsdp - ref_loss), None)
    backend = dist.new_group(backend="pycollect")
    tb = TorchDDP(model(), process_group=backend)
    loss = step(tb)
    diff = max(float((p.detach().cpu() - r).abs().max()) for p, r in zip(tb.module.parameters(), ref_params))
    out["torch DDP on the pycollect backend"] = (abs(loss - ref_loss), diff)
    from pycollect.torch_backend import engine_group

    out["_backend_all_reduces"] = engine_group(backend).counters().get("all_reduce", 0)
    # The same pycollect steps on CPU tensors (a group of its own, not staged): the GPU run
    # must match them up to the devices' float rounding.
    cpu_group = pc.new_group()
    cpu = DistributedDataParallel(model("cpu"), process_group=cpu_group)
    out["_cpu_losses"] = {"pycollect DDP": step(cpu, (x_cpu, y_cpu))}
    fsdp_cpu = model("cpu")
    fully_shard(fsdp_cpu, group=cpu_group)
    out["_cpu_losses"]["pycollect FSDP"] = step(fsdp_cpu, (x_cpu, y_cpu))
    out["_gpu_losses"] = {"pycollect DDP": loss_ddp, "pycollect FSDP": loss_fsdp}
    return out



def bench(dry: bool, log):
    from pycollect.benchmark.launch import Config, run

    sizes = [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20] if not dry else [1 << 12, 1 << 14]
    kw = dict(op="all_reduce", world_size=2, sizes=sizes, iters=3 if not dry else 2, warmup=1, repeats=3,
              link_limit=False, env={})
    cuda = run(Config(peer="gloo", device="cpu" if dry else "cuda", **kw), stream=log)
    cpu = run(Config(peer=None, device="cpu", **kw), stream=log)
    table = ["size        pycollect-cuda  gloo-cuda  x gloo   pycollect-cpu  cuda/cpu   (busbw GB/s)"
             + ("  [dry run: CPU tensors in every column]" if dry else "")]
    rows = []
    for a, c in zip(cuda["rows"], cpu["rows"]):
        ours, gloo, mine_cpu = a["pycollect"]["busbw"], a["gloo"]["busbw"], c["pycollect"]["busbw"]
        rows.append({"size": a["size"], "pycollect_cuda": ours, "gloo_cuda": gloo, "pycollect_cpu": mine_cpu,
                     "wrong": a["pycollect"]["wrong"] + a["gloo"]["wrong"]})
        table.append(f"{a['size']:>10}  {ours:14.3f}  {gloo:9.3f}  {ours / gloo:6.2f}x  {mine_cpu:13.3f}  "
                     f"{ours / mine_cpu:7.2f}x")
    # PYCOLLECT_STAGING_BYTES at 64 MiB (dry run: the smallest size), to tune its default.
    sweep = {}
    for piece in (1 << 20, 4 << 20, 16 << 20):
        kw.update(sizes=[sizes[-2]], repeats=2, env={"PYCOLLECT_STAGING_BYTES": str(piece)})
        r = run(Config(peer=None, device="cpu" if dry else "cuda", **kw), stream=log)
        sweep[piece] = r["rows"][0]["pycollect"]["busbw"]
    table.append(f"staging pieces at {sizes[-2]} B (busbw GB/s): " +
                 ", ".join(f"{p >> 20} MiB {bw:.3f}" for p, bw in sweep.items()))
    return rows, "\n".join(table)


# -- parent side: each step in a process of its own, with a time limit ------------------
def _step_main(fn, args, out) -> None:
    os.setsid()  # its own process group: a step over its limit is killed with its ranks
    try:
        out.put(("ok", fn(*args)))
    except BaseException as e:  # noqa: BLE001 - reported by the parent
        out.put(("error", f"{type(e).__name__}: {str(e)[-1500:]}"))


def run_limited(fn, args, limit: float):
    """fn(*args) in a spawned process; its result, or raises TimeoutError past `limit` s
    (the process and every rank it started are killed) or RuntimeError with its error."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_step_main, args=(fn, args, out), daemon=False)
    p.start()
    deadline = time.monotonic() + limit
    try:
        while True:
            try:
                kind, payload = out.get(timeout=max(0.05, min(0.5, deadline - time.monotonic())))
                break
            except queue.Empty:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"stopped after {limit:.0f} s (the step's limit)") from None
                if not p.is_alive() and out.empty():
                    raise RuntimeError(f"the step's process died (exit code {p.exitcode})") from None
    finally:
        if p.is_alive() or p.exitcode is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        p.join(5)
    if kind == "error":
        raise RuntimeError(payload)
    return payload


def _ranks(job, args, limit: float, group_timeout: float, env: dict, backends=("pycollect", "gloo"), world=2):
    from pycollect.launch import run_ranks

    return run_ranks(job, world, backends, job_args=args, timeout=limit, env=env, group_timeout=group_timeout)


def step_smoke(a, env):
    res = _ranks(smoke_job, (a.dry_run, a.hang), a.limit, SMOKE_TIMEOUT_S, env, ("pycollect",))
    ok = all(r["exact"] for r in res)
    return ok, f"1 MiB all-reduce {'exact' if ok else 'WRONG'} on both ranks, " \
               f"{max(r['seconds'] for r in res) * 1e3:.1f} ms", res


def step_correctness(a, env):
    res = _ranks(correctness_job, (a.dry_run, a.hang), a.limit, a.group_timeout, env)
    fails = [f for r in res for f in r["failures"]]
    differ = [k for k in res[0]["digests"] if res[0]["digests"][k] != res[1]["digests"].get(k)]
    hf = [r["host_free"] for r in res]
    stream_ok = all(r["stream"] in ("ok", "skipped (dry run)") for r in res)
    lines = [f"  {f}" for f in fails[:30]]
    lines.append(f"  bit-identical across ranks: {'yes' if not differ else differ[:10]} ({len(res[0]['digests'])} results)")
    lines.append(f"  stream order: {res[0]['stream']} / {res[1]['stream']}")
    lines.append("  host-free wait: " + "; ".join(
        f"rank {r}: {'ok' if h['ok'] else h['why']}, wait() returned in {h['returned_s'] * 1e3:.1f} ms, "
        f"{'still running' if h['pending_after_wait'] else 'already done'} then" for r, h in enumerate(hf)))
    ok = not fails and res[0]["checked"] > 0 and not differ and stream_ok and all(h["ok"] for h in hf)
    data = {"checked": res[0]["checked"], "gloo_checked": res[0]["gloo_checked"], "failures": fails[:50],
            "rank_differences": differ[:50], "stream": res[0]["stream"], "host_free": hf}
    return ok, f"{res[0]['checked']} calls vs CPU reference, {res[0]['gloo_checked']} vs Gloo, " \
               f"{len(fails)} failures\n" + "\n".join(lines), data


def step_torch_backend(a, env):
    res = _ranks(torch_backend_job, (a.dry_run, a.hang), a.limit, a.group_timeout, env)
    bad = [f"rank {r}: {k} -> {v}" for r, out in enumerate(res) for k, v in out.items()
           if v is False or str(v).startswith("error")]
    same = res[0]["DDP constructor"] == res[1]["DDP constructor"]
    if not same:
        bad.append("DDP constructor: the ranks hold different weights after it")
    return not bad, "list all-gather filled at wait(), DDP constructor passed, weights equal" if not bad \
        else "; ".join(bad), res


def step_training(a, env):
    res = _ranks(training_job, (a.dry_run, a.hang), a.limit, a.group_timeout, env)
    out = res[0]
    lines, ok = [], out["_backend_all_reduces"] > 0
    lines.append(f"  torch DDP's all-reduces on pycollect's engine: {out['_backend_all_reduces']} calls")
    for name, value in out.items():
        if name.startswith("_"):
            continue
        dloss, dparam = value
        good = dloss < 1e-5 and (dparam is None or dparam < 1e-5)
        ok = ok and good
        lines.append(f"  {'ok  ' if good else 'BAD '} {name}: loss differs from torch DDP/Gloo by {dloss:.2e}"
                     + (f", parameters by {dparam:.2e}" if dparam is not None else ""))
    for name, gpu in out["_gpu_losses"].items():
        d = abs(gpu - out["_cpu_losses"][name])
        good = d < 1e-4
        ok = ok and good
        lines.append(f"  {'ok  ' if good else 'BAD '} {name} on the device vs on CPU: loss {gpu:.6f} vs "
                     f"{out['_cpu_losses'][name]:.6f} (differs by {d:.1e})")
    return ok, "one step each\n" + "\n".join(lines), out


def step_max_connections(a, env):
    res = _ranks(max_connections_job, (a.dry_run, a.hang), a.limit, a.group_timeout,
                 dict(env, CUDA_DEVICE_MAX_CONNECTIONS="1"), ("pycollect",))
    bad = [f"rank {r}: {k}" for r, out in enumerate(res) for k, v in out.items() if v is not True]
    return not bad, "blocking wait chosen, results in place at wait()" if not bad else "; ".join(bad), res


def step_nccl(a, env):
    if a.dry_run:
        return None, "no NCCL without a GPU", {}
    import torch

    two = _ranks(nccl_two_ranks_job, (a.dry_run, a.hang), min(60.0, a.limit), a.group_timeout, env, ("gloo",))
    sizes = [1 << 20, 64 << 20]
    one = _ranks(nccl_one_rank_job, (a.dry_run, a.hang, sizes, 10), a.limit, a.group_timeout, env,
                 ("pycollect", "nccl"), world=1)[0]
    lines = [f"  2 ranks on one GPU: {'it worked' if two[0]['worked'] else two[0]['error']}"]
    for size in sizes:
        t = one[size]
        lines.append(f"  world size 1, {size >> 20} MiB all-reduce: NCCL {t['nccl'] * 1e6:.0f} us, pycollect "
                     f"{t['pycollect'] * 1e6:.0f} us (staging through pinned memory: "
                     f"{2 * size / t['pycollect'] / 1e9:.1f} GB/s both ways)")
    return True, f"{torch.cuda.get_device_name(0)}\n" + "\n".join(lines), {"two_ranks": two, "one_rank": one}


def step_bench(a, env):
    _hang_if("bench", a.hang)
    log = io.StringIO()
    rows, table = bench(a.dry_run, log)
    lines = [table]
    wrong = sum(r["wrong"] for r in rows)
    at = next((r for r in rows if r["size"] == 64 << 20), None)
    if at is not None:
        x, y = at["pycollect_cuda"] / at["gloo_cuda"], at["pycollect_cpu"] and at["pycollect_cuda"] / at["pycollect_cpu"]
        lines.append(f"target (not enforced): 64 MiB CUDA busbw {x:.2f}x Gloo's (>= 1.5x), {y:.2f}x pycollect's "
                     "CPU-tensor busbw (>= 0.8x)")
    return not wrong, f"results correct (#wrong {wrong})\n" + "\n".join(lines), {"rows": rows, "table": table}


STEP_FUNCTIONS = {"smoke": step_smoke, "correctness": step_correctness, "torch_backend": step_torch_backend,
                  "training": step_training, "max_connections": step_max_connections, "nccl": step_nccl,
                  "bench": step_bench}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU tensors through the host device, tiny sizes")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--only", help="comma-separated steps to run (default: all): " + ", ".join(STEPS))
    ap.add_argument("--out", default=os.environ.get("OUT") or None)
    ap.add_argument("--limit", type=float, default=150.0, help="seconds each step may take (default 150)")
    ap.add_argument("--step-limit", action="append", default=[], metavar="STEP=S",
                    help="seconds for one step instead of --limit (repeatable)")
    ap.add_argument("--group-timeout", type=float, default=45.0, help="the groups' timeout in s (default 45)")
    ap.add_argument("--budget", type=float, default=420.0,
                    help="seconds for all steps; steps that would start after it are skipped (default 420)")
    ap.add_argument("--hang", choices=STEPS, help="tests of this script: make STEP hang, to see its limit hold")
    a = ap.parse_args(argv)
    steps = [s.strip() for s in a.only.split(",")] if a.only else list(STEPS)
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        ap.error(f"unknown step(s) {unknown}; the steps are {', '.join(STEPS)}")
    limits = {}
    for item in a.step_limit:
        name, _, value = item.partition("=")
        try:
            limits[name] = float(value)
        except ValueError:
            ap.error(f"--step-limit {item!r}: expected STEP=SECONDS")
        if name not in STEPS:
            ap.error(f"--step-limit {item!r}: unknown step; the steps are {', '.join(STEPS)}")
    if a.no_bench and "bench" in steps:
        steps.remove("bench")

    t0 = time.monotonic()
    report = {"dry_run": a.dry_run, "steps": {}}
    env = {"PYCOLLECT_STAGING_BYTES": str(STAGING_BYTES if not a.dry_run else 256)}
    if not a.dry_run:
        import torch

        if not torch.cuda.is_available():
            print("FAIL: no GPU here (torch.cuda.is_available() is False); use --dry-run on CPU")
            return 1
        report["gpu"] = torch.cuda.get_device_name(0)
        print(f"# GPU: {report['gpu']}, torch {torch.__version__}", flush=True)

    def save() -> None:
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            with open(os.path.join(a.out, "gpu_check.json"), "w") as f:
                json.dump(report, f, indent=1, default=str)

    ok = True
    for name in steps:
        left = a.budget - (time.monotonic() - t0)
        if left < 20:
            print(f"SKIP {name}: the budget of {a.budget:.0f} s is spent", flush=True)
            report["steps"][name] = {"status": "SKIP", "why": "budget spent"}
            save()
            continue
        limit = min(limits.get(name, a.limit), left)
        fn = STEP_FUNCTIONS[name]
        s0 = time.monotonic()
        try:
            passed, summary, data = run_limited(fn, (a, env), limit)
        except Exception as e:  # noqa: BLE001 - a failed step is reported; the next one runs
            passed, summary, data = False, f"{type(e).__name__}: {e}", None
        took = time.monotonic() - s0
        status = "SKIP" if passed is None else "PASS" if passed else "FAIL"
        ok = ok and passed is not False
        print(f"{status} {name} ({took:.0f} s): {summary}", flush=True)
        report["steps"][name] = {"status": status, "seconds": took, "summary": summary, "data": data}
        if name == "bench" and data and a.out:
            with open(os.path.join(a.out, "gpu_check.txt"), "w") as f:
                f.write(data["table"] + "\n")
        save()
    report["seconds"] = time.monotonic() - t0
    save()
    print(f"{'PASS' if ok else 'FAIL'} gpu_check{' (dry run)' if a.dry_run else ''} in {report['seconds']:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
