"""A DeviceMesh's groups: how long N local ranks take to make a (rows, cols) mesh on "pycollect"
and on "gloo", same machine, same run.

    .venv/bin/python bench/mesh_groups.py                  # 16 ranks, a (4, 4) mesh, 3 repeats
    .venv/bin/python bench/mesh_groups.py -n 16 --shape 4 4 --repeats 5

Each rank (forked from a server that imported torch once; the parent hosts the TCPStore, as
torchrun's agent does) joins the default group of the backend, then, from one wall-clock
instant the parent publishes, times `init_device_mesh("cpu", shape)` (on a CPU process
torch makes each dimension's groups with new_group: dist.split_group refuses any backend
without an accelerator) and then one all-reduce on each dimension's group (the first use,
when pycollect makes the links the ring needs). The slowest rank counts; medians over the
repeats, the backends alternated.
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time


def _rank(rank: int, n: int, port: int, backend: str, shape, conn, parent_env: dict) -> None:
    from pycollect.launch import adopt_environment

    adopt_environment(parent_env, {})
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if backend == "pycollect":
        import pycollect.torch_backend  # noqa: F401 - registers "pycollect"
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, n, is_master=False, timeout=datetime.timedelta(seconds=120))
    dist.init_process_group(backend, store=dist.PrefixStore(backend, store), rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=120))
    conn.send("ready")
    start = float(store.get("start").decode())
    time.sleep(max(0.0, start - time.time()))
    t0 = time.time()
    mesh = init_device_mesh("cpu", tuple(shape), mesh_dim_names=("rows", "cols"))
    made = time.time()
    for dim in ("rows", "cols"):
        t = torch.ones(256)
        dist.all_reduce(t, group=mesh.get_group(dim))
        assert t[0].item() == mesh.size(mesh.mesh_dim_names.index(dim))
    conn.send((made - t0, time.time() - t0))
    dist.destroy_process_group()


def run(n: int, shape, backend: str):
    import torch.distributed as dist

    from pycollect.launch import free_port, rank_context

    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, n, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=120))
    ctx = rank_context()
    pipes, procs = [], []
    for r in range(n):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_rank, args=(r, n, port, backend, shape, child, dict(os.environ)), daemon=True)
        p.start()
        pipes.append(parent)
        procs.append(p)
    try:
        for c in pipes:
            if not c.poll(300) or c.recv() != "ready":
                raise RuntimeError("a rank did not start")
        store.set("start", repr(time.time() + 0.5))
        times = []
        for c in pipes:
            if not c.poll(300):
                raise RuntimeError("a rank did not make the mesh within 300 s")
            times.append(c.recv())
        return max(t[0] for t in times), max(t[1] for t in times)
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--ranks", type=int, default=16)
    ap.add_argument("--shape", type=int, nargs=2, default=[4, 4])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.shape[0] * args.shape[1] != args.ranks:
        ap.error(f"a {args.shape[0]} x {args.shape[1]} mesh needs {args.shape[0] * args.shape[1]} ranks")
    print(f"# bench/mesh_groups.py: {args.ranks} ranks, a {tuple(args.shape)} mesh; load {os.getloadavg()[0]:.1f}")
    runs: dict = {}
    for rep in range(args.repeats):
        for backend in (("pycollect", "gloo") if rep % 2 == 0 else ("gloo", "pycollect")):
            made, used = run(args.ranks, args.shape, backend)
            runs.setdefault(backend, []).append((made, used))
            print(f"  {backend}: mesh {made:.3f} s, + an all-reduce on each dimension {used:.3f} s "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
    med = {b: (statistics.median(m for m, _ in v), statistics.median(u for _, u in v)) for b, v in runs.items()}
    print("\n| backend | init_device_mesh | + an all-reduce on each dimension |")
    print("|---|---|---|")
    for b in ("pycollect", "gloo"):
        print(f"| {b} | {med[b][0]:.3f} s | {med[b][1]:.3f} s |")
    print(f"\npycollect / gloo: {med['pycollect'][0] / med['gloo'][0]:.2f}x (mesh), "
          f"{med['pycollect'][1] / med['gloo'][1]:.2f}x (with the first all-reduces)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
