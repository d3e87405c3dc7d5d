"""Formation as torchrun users see it: pycollect beside Gloo, in the same fresh processes.

bench/formation.py forks its ranks from a server that imported torch and pycollect once and
ran nothing else; a user's ranks are fresh processes that torchrun starts. This benchmark
starts N ranks with `torch.distributed.run --standalone --nproc-per-node N` (each imports
torch and pycollect itself), and in every rank, for each engine in turn (the order alternates
from launch to launch, --repeats launches per N):

  1. wait for one wall-clock instant, published in torchrun's own store (rank 0 sets it a
     little after every rank said it is ready): no barrier of the engines under test;
  2. from that instant: `dist.init_process_group(engine)` (env://, torchrun's store), then a
     first 1 MiB float32 all-reduce; the time to its end is this rank's formation;
  3. `dist.destroy_process_group()`.

and the CPU time its process spent in step 2 (every thread): with more ranks than cores,
formation is bound by the sum over the ranks, which the load of a shared machine does not
change as much as the wall-clock times.

Rank 0 collects every rank's time through the store and prints one JSON line per engine:
rank 0's own time (what a script that prints "ready" on rank 0 sees) and the slowest rank's
(when the job can go on). The parent prints the medians per N and engine, and the ratio
pycollect / Gloo of each view; --json keeps every launch. The engine that runs first in a
process also pays what the two share the first time it is used (torch.distributed's lazy
pieces); alternating the order shares that out.

    .venv/bin/python bench/formation_torchrun.py -n 16 32 48 --repeats 4
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

ENGINES = ("pycollect", "gloo")
AR_ELEMS = (1 << 20) // 4  # 1 MiB of float32


def rank_side(order: list, connected: bool) -> None:
    import torch
    import torch.distributed as dist

    import pycollect  # noqa: F401  (registers the backend, as a user's script does)

    # pycollect loads its API and the backend's bridge when torch first makes a group of it;
    # as in bench/formation.py they are imported before the start, and what that costs is
    # reported beside the times (Gloo's code came with `import torch`).
    cpu = time.process_time()
    import pycollect.api  # noqa: F401
    import pycollect.torch_backend.native  # noqa: F401

    import_s = time.process_time() - cpu
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), size, False,
                          timeout=datetime.timedelta(seconds=300))
    x = torch.ones(AR_ELEMS)
    for step, engine in enumerate(order):
        store.add(f"bench/ready{step}", 1)
        if rank == 0:
            while store.add(f"bench/ready{step}", 0) < size:
                time.sleep(0.005)
            store.set(f"bench/start{step}", repr(time.time() + 0.3))
        start = float(store.get(f"bench/start{step}"))
        while time.time() < start:
            time.sleep(min(0.001, max(0.0, start - time.time())))
        late = time.time() - start
        cpu = time.process_time()
        if connected:  # the rank's store client, connected before the start
            dist.init_process_group(engine, store=dist.PrefixStore(f"bench/pg{step}", store), rank=rank,
                                    world_size=size)
        else:  # env://: a new client of torchrun's store, connected inside the call
            dist.init_process_group(engine)
        formed = time.time() - start
        dist.all_reduce(x)
        took, cpu = time.time() - start, time.process_time() - cpu
        dist.destroy_process_group()
        assert x[0].item() == size ** (step + 1), x[0].item()  # each all-reduce summed every rank's ones
        mine = {"took": took, "cpu": cpu, "imports": import_s if engine == "pycollect" else 0.0, "late": late,
                "formed": formed}
        store.set(f"bench/took{step}/{rank}", json.dumps(mine))
        if rank == 0:
            got = [json.loads(store.get(f"bench/took{step}/{r}")) for r in range(size)]
            print("FORMATION " + json.dumps({"engine": engine, "n": size, "position": step, "rank0_s": got[0]["took"],
                                             "slowest_s": max(g["took"] for g in got),
                                             "cpu_s": sum(g["cpu"] for g in got),
                                             "import_cpu_s": sum(g["imports"] for g in got),
                                             "late_s": max(g["late"] for g in got),
                                             "formed_s": max(g["formed"] for g in got)}), flush=True)


def launch(n: int, order: list, store: str) -> list:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n),
           os.path.abspath(__file__), "--rank-side", ",".join(order), "--store", store]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"torchrun failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return [json.loads(line.split(" ", 1)[1]) for line in p.stdout.splitlines() if line.startswith("FORMATION ")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, nargs="+", default=[16, 32, 48], help="ranks per launch")
    ap.add_argument("--repeats", type=int, default=4, help="launches per N (the engines' order alternates)")
    ap.add_argument("--json", help="write every launch's rows here")
    ap.add_argument("--store", choices=("connected", "env"), default="connected",
                    help="connected: init_process_group(store=) with the store client each rank connected before "
                         "the start; env: env://, a new client inside the call (all ranks at one instant)")
    ap.add_argument("--rank-side", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank_side:
        rank_side(args.rank_side.split(","), args.store == "connected")
        return
    rows = []
    print(f"load before: {os.getloadavg()[0]:.1f}", flush=True)
    for n in args.n:
        for r in range(args.repeats):
            order = list(ENGINES) if r % 2 == 0 else list(reversed(ENGINES))
            got = launch(n, order, args.store)
            rows += got
            print(f"  n={n} launch {r + 1}: " + ", ".join(f"{g['engine']} {g['rank0_s']:.3f}/{g['slowest_s']:.3f} s "
                                                      f"(CPU {g['cpu_s']:.2f} s)"
                                                      for g in got) + f"  (load {os.getloadavg()[0]:.1f})", flush=True)
    print(f"\nmedians over {args.repeats} launches (rank 0 / slowest rank), seconds from the common start to the "
          "end of the first 1 MiB all-reduce:")
    print(f"{'ranks':>5} {'pycollect':>17} {'gloo':>17} {'ratio (r0 / slowest)':>22} {'CPU s, all ranks':>22}"
          "  (+ pycollect's lazy imports, CPU s, all ranks)")
    for n in args.n:
        med = {}
        for e in ENGINES:
            mine = [g for g in rows if g["n"] == n and g["engine"] == e]
            med[e] = tuple(statistics.median(g[k] for g in mine) for k in ("rank0_s", "slowest_s", "cpu_s"))
        p, g = med["pycollect"], med["gloo"]
        imports = statistics.median(g["import_cpu_s"] for g in rows if g["n"] == n and g["engine"] == "pycollect")
        print(f"{n:>5} {p[0]:>8.3f} / {p[1]:.3f} {g[0]:>8.3f} / {g[1]:.3f} {p[0] / g[0]:>10.2f}x / {p[1] / g[1]:.2f}x "
              f"{p[2]:>9.2f} / {g[2]:.2f} (gloo)   + imports {imports:.2f}")
    print(f"load after: {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
