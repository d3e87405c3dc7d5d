"""All-reduce latency against DeepSpeed's shared-memory all-reduce, in the same ranks.

DeepSpeed's CPU all-reduce for inference (`deepspeed.comm.inference_all_reduce`: its
ShareMemComm op, each rank reading its peers' buffers in place) is the same-host anchor for
small and medium sizes. For each size (float32, 8 B to 16 MiB by default) the same ranks run,
in alternating blocks of single calls, each timed alone:
  engine     pycollect's C++ loop (pycollect/benchmark/engine.py), no Python per call
  api        pycollect.all_reduce on a torch tensor
  torch      dist.all_reduce on a "pycollect" torch group (torch's dispatch included)
  deepspeed  deepspeed.comm.inference_all_reduce (DS_ACCELERATOR=cpu, LOCAL_SIZE = ranks)
  gloo       dist.all_reduce on the default Gloo group
The median of each (the slowest rank's) and DeepSpeed's time over pycollect's API and torch
paths (> 1: pycollect is faster). Needs DeepSpeed (`bash scripts/test_frameworks.sh`
installs it and builds the op; the first run here builds it otherwise, ~2 min). --json
writes the rows for bench/plot_latency.py.

    .venv/bin/python bench/deepspeed_allreduce.py [-g 2] [-b 8] [-e 16M] [-n 200] [-r 5] [--json F]
"""
import argparse
import glob
import json
import os
import sys
import time

ENGINES = ("engine", "api", "torch", "deepspeed", "gloo")
DS_SEGMENTS = "/dev/shm/deepspeed_allreduce_buffer_*"  # the shared memory DeepSpeed's op makes


def job(rank, world, emit, sizes, iters, repeats):
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ["LOCAL_SIZE"] = str(world)  # DeepSpeed's shared memory only where every rank is local
    import torch
    import torch.distributed as dist

    import deepspeed
    import deepspeed.comm as dsc

    import pycollect as pc
    import pycollect.torch_backend as tb
    from pycollect.benchmark.engine import engine_loop
    from pycollect.benchmark.latency import percentiles, slowest

    deepspeed.init_distributed(dist_backend="gloo")  # torch's default group is up: DeepSpeed adopts it
    tb.register()
    group = dist.new_group(backend="pycollect")
    level = getattr(dsc.cdb, "shm_vector_kernel_level", 0)  # as inference_all_reduce decides (float32: >= 1)
    used_op = f"{hasattr(torch.ops, 'deepspeed') and hasattr(torch.ops.deepspeed, 'inference_all_reduce_')}, " \
              f"vector kernel level {level}"
    if rank == 0:
        emit("ds", used_op)

    def timed(fn, t):
        pc.barrier()
        out = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn(t)
            out.append((time.perf_counter() - t0) * 1e6)
        return out

    calls = {
        "api": lambda t: pc.all_reduce(t),
        "torch": lambda t: dist.all_reduce(t, group=group),
        "deepspeed": lambda t: dsc.inference_all_reduce(t),
        "gloo": lambda t: dist.all_reduce(t),
    }
    for size in sizes:
        n = max(1, size // 4)
        t = torch.ones(n)
        for fn in calls.values():  # warm-up (and DeepSpeed's buffers for this size)
            for _ in range(5):
                fn(t)
        engine_loop("all_reduce", size, 10, warmup=5)
        samples = {e: [] for e in ENGINES}
        for rep in range(repeats):
            order = ENGINES if rep % 2 == 0 else ENGINES[::-1]
            for e in order:
                if e == "engine":
                    samples[e] += engine_loop("all_reduce", size, iters, warmup=0)[0]
                else:
                    t = torch.ones(n)
                    samples[e] += timed(calls[e], t)
        # Correctness of what was timed: every engine sums the same ones.
        for e, fn in calls.items():
            t = torch.full((n,), float(rank + 1))
            fn(t)
            assert torch.all(t == world * (world + 1) / 2), (e, size, t[:4])
        row = {"size": n * 4, **{e: slowest(percentiles(v)[0]) for e, v in samples.items()}}
        if rank == 0:
            emit("row", row)


def main() -> int:
    from pycollect.launch import run_ranks
    from pycollect.measuring import parse_size, size_list

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-g", "--world-size", type=int, default=2)
    p.add_argument("-b", "--minbytes", default="8")
    p.add_argument("-e", "--maxbytes", default="16M")
    p.add_argument("-f", "--stepfactor", type=float, default=4.0)
    p.add_argument("-n", "--iters", type=int, default=200)
    p.add_argument("-r", "--repeats", type=int, default=5)
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()
    sizes = size_list(parse_size(args.minbytes), parse_size(args.maxbytes), args.stepfactor)
    world, cores = args.world_size, os.cpu_count() or 1
    placed = f"{world} ranks on {cores} cores" + (", oversubscribed" if world > cores else "")
    print(f"# all-reduce float32, {placed}, {args.iters} calls x {args.repeats} blocks per engine, median us "
          f"(slowest rank); load average {os.getloadavg()[0]:.2f}", flush=True)
    print(f"{'bytes':>9} " + " ".join(f"{e:>10}" for e in ENGINES) + f" {'ds/api':>7} {'ds/torch':>8}", flush=True)
    rows = []

    def on_event(rank, event):
        if event[0] == "ds":
            print(f"# DeepSpeed's shared-memory op in use: {event[1]}", flush=True)
            return
        r = event[1]
        rows.append(r)
        print(f"{r['size']:>9} " + " ".join(f"{r[e]:>10.2f}" for e in ENGINES)
              + f" {r['deepspeed'] / r['api']:>6.2f}x {r['deepspeed'] / r['torch']:>7.2f}x", flush=True)

    started = time.time()
    try:
        run_ranks(job, world, ["pycollect", "gloo"], job_args=(sizes, args.iters, args.repeats), timeout=3600,
                  on_event=on_event)
    finally:
        # DeepSpeed's op never unlinks its buffers (one name per rank, reused run after run):
        # those this run wrote go, ~69 MB each.
        for path in glob.glob(DS_SEGMENTS):
            if os.path.getmtime(path) >= started - 1:
                os.unlink(path)
    print(f"# load average at the end {os.getloadavg()[0]:.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"world_size": world, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
