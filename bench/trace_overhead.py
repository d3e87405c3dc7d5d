"""What tracing costs when off: a 64 MiB float32 all-reduce on 2 local ranks, timed with
the build with the trace hooks or the one without (-DPYCOLLECT_TRACE_HOOKS=OFF),
launches in ABBA order (docs/traces.md).

    bash bench/trace_overhead.sh      # builds both, runs, prints the summary and the bound

One launch of this file times `blocks` blocks of `iters` calls (seconds per call, the
slower rank's) with whichever pycollect is first on sys.path; mode "flag" alternates
blocks with tracing off and on in the same processes (and counts the events per call);
"hooks" prints whether the build has them; "bound" turns ns per hook into a share of a call.
"""
import contextlib
import json
import statistics
import sys
import time


def job(rank, world, emit, nbytes, iters, blocks, mode):
    import torch

    import pycollect.api as pc

    t = torch.ones(nbytes // 4)
    for _ in range(3):
        pc.all_reduce(t)
    out = {"off": [], "on": []}
    for b in range(blocks):
        order = ("off",) if mode == "plain" else (("off", "on") if b % 2 == 0 else ("on", "off"))
        for m in order:
            pc.barrier()
            ctx = pc.tracing() if m == "on" else contextlib.nullcontext()
            t0 = time.perf_counter()
            with ctx:
                for _ in range(iters):
                    pc.all_reduce(t)
            out[m].append((time.perf_counter() - t0) / iters)
            if m == "on":
                out.setdefault("events_per_call", []).append(len(pc.take_trace()) / iters)
    return out


def summarize(path: str) -> None:
    """Lines 'LABEL LOAD JSON' -> median of per-launch medians and minima per label (ms)."""
    per_label = {}
    for line in open(path):
        if "{" not in line:
            continue
        label, load = line.split()[:2]
        r = json.loads(line[line.index("{"):])
        for mode in ("off", "on"):
            blocks = [max(a, b) for a, b in zip(r["rank0"][mode], r["rank1"][mode])]
            if blocks:
                per_label.setdefault(f"{label}/{mode}", []).append((statistics.median(blocks), min(blocks), load))
    for key, rows in per_label.items():
        print(f"{key:12s} launches {len(rows):3d}  median of medians {statistics.median(r[0] for r in rows) * 1e3:7.2f} ms"
              f"  median of minima {statistics.median(r[1] for r in rows) * 1e3:7.2f} ms"
              f"  load {min(r[2] for r in rows)}-{max(r[2] for r in rows)}")


def bound(ns_per_hook: float, flag_path: str, plain_path: str) -> None:
    """Every event is one hook passed; the hooks that record none (Context::setStep /
    setUnit, once per unit of work that records events) are at most as many again: 2 x events per call x ns per hook,
    against the median call of the hooks build."""
    events = max(max(json.loads(line[line.index("{"):])[r].get("events_per_call", [0]))
                 for line in open(flag_path) if "{" in line for r in ("rank0", "rank1"))
    calls = [max(a, b) for line in open(plain_path) if line.startswith("hooks ")
             for r in [json.loads(line[line.index("{"):])] for a, b in zip(r["rank0"]["off"], r["rank1"]["off"])]
    hooks, call = 2 * events, statistics.median(calls)
    print(f"bound: {ns_per_hook:.2f} ns per hook (bench/hook_cost.cc) x at most {hooks:.0f} hooks per call "
          f"({events:.0f} events) = {hooks * ns_per_hook / 1e3:.2f} us of a {call * 1e3:.2f} ms call: "
          f"{hooks * ns_per_hook * 1e-9 / call * 100:.4f} %")


if __name__ == "__main__":
    if sys.argv[1] == "summarize":
        summarize(sys.argv[2])
        sys.exit(0)
    if sys.argv[1] == "bound":
        bound(float(sys.argv[2]), sys.argv[3], sys.argv[4])
        sys.exit(0)
    if sys.argv[1] == "hooks":
        from pycollect import _C

        print(_C.TRACE_HOOKS)
        sys.exit(0)
    from pycollect.launch import run_ranks

    mode, blocks, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    res = run_ranks(job, 2, ("pycollect",), job_args=(64 << 20, iters, blocks, mode), timeout=600)
    print(json.dumps({"rank0": res[0], "rank1": res[1]}))
