"""Parent side of the benchmark: spawn the ranks on loopback, stream the rows.

Rank 0 sends each finished row to the parent through a queue, so the table
prints while the run goes on (the progress output of a long run).
"""
from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import platform
import queue as queue_mod
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

from . import report


@dataclass
class Config:
    op: str = "all_reduce"
    world_size: int = 2
    sizes: List[int] = field(default_factory=list)
    dtype: str = "float32"
    iters: int = 20
    warmup: int = 5
    repeats: int = 5
    peer: Optional[str] = "gloo"
    link_limit: bool = True
    env: Dict[str, str] = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, cfg: Config, port: int, out) -> None:
    os.environ.update(cfg.env)
    try:
        import torch
        import torch.distributed as dist

        from .. import api as pc
        from . import linklimit, runner

        torch.set_num_threads(1)
        n = cfg.world_size
        td = datetime.timedelta(seconds=120)
        store = dist.TCPStore("127.0.0.1", port, n, is_master=rank == 0, timeout=td, wait_for_workers=False)
        pc.init_process_group(store=dist.PrefixStore("pycollect", store), rank=rank, world_size=n, timeout=td)
        peer = None
        if cfg.peer == "gloo":
            dist.init_process_group("gloo", store=dist.PrefixStore("gloo", store), rank=rank, world_size=n,
                                    timeout=td)
            peer = runner.Engine("gloo")
        if cfg.link_limit and n > 1:
            limit = linklimit.measure(rank)
            if rank == 0:
                out.put(("link", limit))
        for row in runner.run(cfg.op, cfg.sizes, cfg.dtype, cfg.iters, cfg.warmup, cfg.repeats, peer,
                              runner.Engine("pycollect"), rank, n):
            if rank == 0:
                out.put(("row", row))
        pc.destroy_process_group()
        if peer:
            dist.destroy_process_group()
        out.put(("done", rank))
    except BaseException as e:  # the parent prints it and stops the others
        import traceback

        out.put(("error", f"rank {rank}: {type(e).__name__}: {e}\n{traceback.format_exc()}"))


def run(cfg: Config, json_path: Optional[str] = None, plot_path: Optional[str] = None,
        stream=sys.stdout, timeout: float = 1800.0) -> Dict:
    """Run the benchmark; print the table as it goes; return {meta, rows, link_limit}."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, cfg, port, out), daemon=True) for r in range(cfg.world_size)]
    for p in procs:
        p.start()
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores", "python": platform.python_version(),
            **asdict(cfg)}
    rows: List[Dict] = []
    link = None
    done = 0
    print(f"# pycollect bench: {cfg.op}, {cfg.world_size} ranks on loopback, {cfg.dtype}, "
          f"iters {cfg.iters} x {cfg.repeats} blocks (median), warm-up {cfg.warmup}, peer {cfg.peer or 'none'}",
          file=stream, flush=True)
    printed_header = False
    deadline = time.monotonic() + timeout
    try:
        while done < cfg.world_size:
            try:
                kind, value = out.get(timeout=5)
            except queue_mod.Empty:
                dead = [r for r, p in enumerate(procs) if not p.is_alive() and p.exitcode not in (0, None)]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"benchmark ranks {dead} died" if dead else "benchmark timed out")
                continue
            if kind == "error":
                raise RuntimeError(value)
            if kind == "link":
                link = value
                print(f"# link limit: {link:.3f} GB/s per direction", file=stream, flush=True)
            elif kind == "row":
                if not printed_header:
                    print(report.header(cfg.op, cfg.peer), file=stream, flush=True)
                    printed_header = True
                rows.append(value)
                print(report.format_row(value, cfg.peer), file=stream, flush=True)
            else:
                done += 1
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    print(report.summary(rows, cfg.op, cfg.peer, link), file=stream, flush=True)
    meta["link_limit_GBps"] = link
    if json_path:
        report.write_json(json_path, meta, rows)
        print(f"# wrote {json_path}", file=stream)
    if plot_path and rows:
        report.plot(plot_path, cfg.op, rows, cfg.peer, link,
                    f"{cfg.op}, {cfg.world_size} ranks, {cfg.dtype}, loopback ({meta['machine']})")
        print(f"# wrote {plot_path}", file=stream)
    return {"meta": meta, "rows": rows, "link_limit": link}
