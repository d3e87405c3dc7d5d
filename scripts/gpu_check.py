"""The GPU check of issue 12, as one plain Python program (no pytest needed).

    python3 scripts/gpu_check.py                 # on a machine with a GPU (2 ranks on cuda:0)
    python3 scripts/gpu_check.py --dry-run       # anywhere: the same steps on CPU tensors staged
                                                 # through the engine's host device, tiny sizes

Steps (each prints PASS or FAIL lines):
  1. correctness: every collective and point-to-point call x dtypes x ops x sizes (0, 1,
     uneven, several staged pieces) on CUDA tensors, checked against a float64/int64 CPU
     reference and against Gloo on the same CUDA tensors (Gloo's all-reduce / all-gather
     for the calls Gloo lacks), and bit-identical across ranks; plus stream order (a
     result must include work queued on the caller's stream before the call), and the
     host-free wait: wait() returns while the call runs, a kernel queued after it on the
     current stream sees the result; wait(blocking=True) returns with it in place.
  2. training: one step of pycollect DDP, pycollect FSDP and torch DDP over the
     "pycollect" torch backend on a GPU model, against torch DDP over Gloo.
  3. benchmark: all_reduce 1 MiB - 256 MiB on CUDA tensors, pycollect vs Gloo in the same
     run, and pycollect on CPU tensors; one table, and the issue's targets at 64 MiB.
With $OUT (or --out) set, writes gpu_check.txt (the table) and gpu_check.json there.
Exit status: 0 when every correctness and training check passed (the benchmark targets
are reported, not enforced), 1 otherwise.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
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


def correctness_job(rank, n, emit, dry):
    import torch
    import torch.distributed as dist

    import pycollect as pc
    from pycollect import api

    dev = "cpu" if dry else "cuda:0"
    if dry:
        api._default().use_host_device()
    else:
        torch.cuda.set_device(0)
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


def training_job(rank, n, emit, dry):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as TorchDDP

    import pycollect as pc
    from pycollect.ddp import DistributedDataParallel
    from pycollect.fsdp import fully_shard

    dev = "cpu" if dry else "cuda:0"
    if dry:
        from pycollect import api

        api._default().use_host_device()

    def model():
        torch.manual_seed(7)
        return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).to(dev)

    g = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(16, 32, generator=g).to(dev), torch.randn(16, 8, generator=g).to(dev)

    def step(m):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        opt.zero_grad()
        F.mse_loss(m(x), y).backward()
        opt.step()
        with torch.no_grad():
            return float(F.mse_loss(m(x), y))  # the loss after the step

    ref = TorchDDP(model())  # torch DDP on the default (Gloo) group
    ref_loss = step(ref)
    ref_params = [p.detach().cpu() for p in ref.module.parameters()]
    out = {}
    ours = DistributedDataParallel(model())
    loss = step(ours)
    diff = max(float((p.detach().cpu() - r).abs().max()) for p, r in zip(ours.module.parameters(), ref_params))
    out["pycollect DDP"] = (abs(loss - ref_loss), diff)
    fsdp = model()
    fully_shard(fsdp)
    out["pycollect FSDP"] = (abs(step(fsdp) - ref_loss), None)
    backend = dist.new_group(backend="pycollect")
    tb = TorchDDP(model(), process_group=backend)
    loss = step(tb)
    diff = max(float((p.detach().cpu() - r).abs().max()) for p, r in zip(tb.module.parameters(), ref_params))
    out["torch DDP on the pycollect backend"] = (abs(loss - ref_loss), diff)
    from pycollect.torch_backend import engine_group

    out["_backend_all_reduces"] = engine_group(backend).counters().get("all_reduce", 0)
    return out


# -- parent side -----------------------------------------------------------------------
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU tensors through the host device, tiny sizes")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT") or None)
    args = ap.parse_args(argv)
    from pycollect.launch import run_ranks

    t0 = time.monotonic()
    ok = True
    report = {"dry_run": args.dry_run}
    env = {"PYCOLLECT_STAGING_BYTES": str(STAGING_BYTES if not args.dry_run else 256)}
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            print("FAIL: no GPU here (torch.cuda.is_available() is False); use --dry-run on CPU")
            return 1
        report["gpu"] = torch.cuda.get_device_name(0)
        print(f"# GPU: {report['gpu']}, torch {torch.__version__}", flush=True)

    res = run_ranks(correctness_job, 2, ("pycollect", "gloo"), job_args=(args.dry_run,), timeout=400, env=env)
    fails = [f for r in res for f in r["failures"]]
    differ = [k for k in res[0]["digests"] if res[0]["digests"][k] != res[1]["digests"].get(k)]
    report["correctness"] = {"checked": res[0]["checked"], "gloo_checked": res[0]["gloo_checked"],
                             "failures": fails[:50], "rank_differences": differ[:50], "stream": res[0]["stream"]}
    for f in fails[:30]:
        print(f"  {f}")
    good = not fails and res[0]["checked"] > 0
    print(f"{'PASS' if good else 'FAIL'} correctness: {res[0]['checked']} calls vs CPU reference, "
          f"{res[0]['gloo_checked']} vs Gloo on the same tensors, {len(fails)} failures", flush=True)
    print(f"{'PASS' if not differ else 'FAIL'} bit-identical across ranks ({len(res[0]['digests'])} results)")
    stream_ok = all(r["stream"] in ("ok", "skipped (dry run)") for r in res)
    print(f"{'PASS' if stream_ok else 'FAIL'} stream order: {res[0]['stream']} / {res[1]['stream']}")
    hf = [r["host_free"] for r in res]
    report["correctness"]["host_free"] = hf
    hf_ok = all(h["ok"] for h in hf)
    print(f"{'PASS' if hf_ok else 'FAIL'} host-free wait: " + "; ".join(
        f"rank {r}: {'ok' if h['ok'] else h['why']}, wait() returned in {h['returned_s'] * 1e3:.1f} ms, "
        f"{'still running' if h['pending_after_wait'] else 'already done'} then" for r, h in enumerate(hf)))
    ok = ok and good and not differ and stream_ok and hf_ok

    tr = run_ranks(training_job, 2, ("pycollect", "gloo"), job_args=(args.dry_run,), timeout=300, env=env)
    report["training"] = tr[0]
    calls = tr[0]["_backend_all_reduces"]
    print(f"{'PASS' if calls > 0 else 'FAIL'} torch DDP's all-reduces ran on pycollect's engine ({calls} calls)")
    ok = ok and calls > 0
    for name, value in tr[0].items():
        if name.startswith("_"):
            continue
        dloss, dparam = value
        good = dloss < 1e-5 and (dparam is None or dparam < 1e-5)
        ok = ok and good
        print(f"{'PASS' if good else 'FAIL'} {name}: one step, loss differs from torch DDP/Gloo by {dloss:.2e}"
              + (f", parameters by {dparam:.2e}" if dparam is not None else ""), flush=True)

    table = ""
    if not args.no_bench:
        log = io.StringIO()
        rows, table = bench(args.dry_run, log)
        report["bench"] = rows
        print(table, flush=True)
        wrong = sum(r["wrong"] for r in rows)
        print(f"{'PASS' if not wrong else 'FAIL'} benchmark results correct (#wrong {wrong})")
        ok = ok and not wrong
        at = next((r for r in rows if r["size"] == 64 << 20), None)
        if at is not None:
            a, b = at["pycollect_cuda"] / at["gloo_cuda"], at["pycollect_cpu"] and at["pycollect_cuda"] / at["pycollect_cpu"]
            print(f"{'PASS' if a >= 1.5 else 'FAIL'} target (not enforced): 64 MiB CUDA busbw {a:.2f}x Gloo's (>= 1.5x)")
            print(f"{'PASS' if b >= 0.8 else 'FAIL'} target (not enforced): 64 MiB CUDA busbw {b:.2f}x pycollect's "
                  "CPU-tensor busbw (>= 0.8x)")
    elapsed = time.monotonic() - t0
    report["seconds"] = elapsed
    print(f"{'PASS' if ok else 'FAIL'} gpu_check{' (dry run)' if args.dry_run else ''} in {elapsed:.0f} s")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "gpu_check.txt"), "w") as f:
            f.write(table + "\n")
        with open(os.path.join(args.out, "gpu_check.json"), "w") as f:
            json.dump(report, f, indent=1, default=str)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
