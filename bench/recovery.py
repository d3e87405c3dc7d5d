"""Recovery from a lost rank: the time from a SIGKILL to the survivors' first completed
all-reduce, shrinking on pycollect against restarting under torchrun, same machine, same run.

    .venv/bin/python bench/recovery.py                    # 4 and 8 ranks, 3 repeats
    .venv/bin/python bench/recovery.py -n 4 8 16 --repeats 3

Each run: N local ranks all-reduce 1 MiB (float32) in a loop on the torch default group;
the last rank is SIGKILLed; the clock runs from the kill to the moment the last survivor
completes its first all-reduce after it.

  shrink         pycollect: the survivors catch the failed call, dist.shrink_group([lost],
                 SHRINK_ABORT) and all-reduce on the group it returns (docs/architecture.md).
                 The ranks are forked from a server that imported torch once, and the parent
                 hosts the TCPStore, as torchrun's agent does (a worker's loss makes
                 torchrun's agent stop every worker, so shrinking runs under a launcher that
                 lets the survivors be).
  restart gloo   torchrun --max-restarts 1 on Gloo: the agent notices the loss (its monitor
  restart pyc.   interval: 0.1 s), stops the survivors, starts all N again (each a fresh
                 interpreter importing torch), they form the group and all-reduce once.

Load matters on a 2-core machine: the restart's cost is mostly N interpreters importing torch
at once. The runs alternate between the modes, repeat by repeat; medians are reported.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

COUNT = 1 << 18  # floats: 1 MiB a rank
HERE = os.path.abspath(__file__)


# -- shrink: ranks forked by this process, the store hosted here -------------------------


def _shrink_rank(rank: int, n: int, port: int, conn, parent_env: dict) -> None:
    """A rank of the shrink run: ready, then all-reduce until the loss, shrink, all-reduce."""
    from pycollect.launch import adopt_environment

    adopt_environment(parent_env, {})
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import SHRINK_ABORT

    import pycollect.torch_backend  # noqa: F401 - registers "pycollect"

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, n, is_master=False, timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("pycollect", store=store, rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=30))
    t = torch.ones(COUNT)
    dist.all_reduce(t)
    conn.send(("ready", rank))
    try:
        while True:
            dist.all_reduce(t)
    except Exception:  # noqa: BLE001 - the loss, as torch raises it
        pass
    group = dist.shrink_group([n - 1], shrink_flags=SHRINK_ABORT)
    t = torch.ones(COUNT)
    dist.all_reduce(t, group=group)
    conn.send(("done", time.time(), float(t[0])))
    dist.destroy_process_group()


def shrink_run(n: int) -> float:
    import torch.distributed as dist

    from pycollect.launch import free_port, rank_context

    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, n, is_master=True, wait_for_workers=False,  # noqa: F841 - kept alive
                          timeout=datetime.timedelta(seconds=60))
    ctx = rank_context()
    pipes, procs = [], []
    for r in range(n):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_shrink_rank, args=(r, n, port, child, dict(os.environ)), daemon=True)
        p.start()
        pipes.append(parent)
        procs.append(p)
    try:
        for c in pipes:
            if not c.poll(120) or c.recv()[0] != "ready":
                raise RuntimeError("a rank did not start")
        time.sleep(0.3)
        killed = time.time()
        os.kill(procs[-1].pid, signal.SIGKILL)
        done = []
        for c in pipes[:-1]:
            if not c.poll(60):
                raise RuntimeError("a survivor did not all-reduce after the shrink within 60 s")
            kind, at, value = c.recv()
            if value != float(n - 1):
                raise RuntimeError(f"the all-reduce after the shrink gave {value}, expected {n - 1}")
            done.append(at)
        return max(done) - killed
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()


# -- restart: torchrun --max-restarts 1, a worker kills itself ----------------------------


def _restart_worker(backend: str, out: str) -> None:
    """A torchrun worker: attempt 0 all-reduces until the last rank kills itself (writing the
    time first); attempt 1 forms the group, all-reduces once and writes the time."""
    import torch
    import torch.distributed as dist

    if backend == "pycollect":
        import pycollect.torch_backend  # noqa: F401 - registers "pycollect"
    torch.set_num_threads(1)
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    # The agent's store outlives an attempt and keeps its keys: each attempt takes a prefix of
    # its own (Gloo would read the dead attempt's addresses and time out connecting to them;
    # pycollect scopes its keys by attempt anyway, formation.store_scope).
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), n, is_master=False,
                          timeout=datetime.timedelta(seconds=60))
    dist.init_process_group(backend, store=dist.PrefixStore(f"attempt{attempt}", store), rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=30))
    t = torch.ones(COUNT)
    dist.all_reduce(t)
    if attempt > 0:
        with open(os.path.join(out, f"done.{rank}"), "w") as f:
            f.write(repr(time.time()))
        dist.destroy_process_group()
        return
    for step in range(100000):
        if rank == n - 1 and step == 20:
            with open(os.path.join(out, "killed"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(t)


def restart_run(n: int, backend: str) -> float:
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    with tempfile.TemporaryDirectory(prefix="pycollect-recovery-") as out:
        cmd = [torchrun, "--standalone", f"--nproc-per-node={n}", "--max-restarts=1", HERE,
               "--worker", backend, "--out", out]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"torchrun failed ({done.returncode}):\n{done.stderr[-2000:]}")
        with open(os.path.join(out, "killed")) as f:
            killed = float(f.read())
        ends = []
        for r in range(n):
            with open(os.path.join(out, f"done.{r}")) as f:
                ends.append(float(f.read()))
        return max(ends) - killed


MODES = {"shrink": shrink_run, "restart gloo": lambda n: restart_run(n, "gloo"),
         "restart pycollect": lambda n: restart_run(n, "pycollect")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--ranks", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write every run's figures here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _restart_worker(args.worker, args.out)
        return 0
    print(f"# bench/recovery.py: load {os.getloadavg()[0]:.1f}; seconds from the SIGKILL to the survivors' "
          "first all-reduce")
    runs: dict = {}
    for n in args.ranks:
        for rep in range(args.repeats):
            order = list(MODES) if rep % 2 == 0 else list(reversed(MODES))
            for mode in order:
                took = MODES[mode](n)
                runs.setdefault((n, mode), []).append(took)
                print(f"  {n} ranks, {mode}: {took:.3f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    print("\n| ranks | shrink (pycollect) | restart (Gloo) | restart (pycollect) | restart Gloo / shrink |")
    print("|---|---|---|---|---|")
    for n in args.ranks:
        med = {m: statistics.median(runs[n, m]) for m in MODES}
        print(f"| {n} | {med['shrink']:.3f} | {med['restart gloo']:.2f} | {med['restart pycollect']:.2f} | "
              f"{med['restart gloo'] / med['shrink']:.0f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{n}/{m}": v for (n, m), v in runs.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
