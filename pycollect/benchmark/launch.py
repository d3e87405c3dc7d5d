"""Parent side of the benchmark: start the ranks, stream the rows.

The ranks are started by pycollect.launch.run_ranks (pycollect's default group, plus
Gloo's when it is a peer), or by mpirun when MPI is one (benchmark.mpi); rank 0 sends each finished row as an event, so the
table prints while the run goes on (the progress output of a long run). Ranks run on
loopback, or with `netns_hosts` one per host of pycollect.netns.Hosts, whose cables
carry `line_rate` each way: busbw can then be read against a known line rate.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

from .. import netns
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
    peer: Optional[str] = "gloo"  # the engines timed beside pycollect: gloo, nccl, mpi or a list ("gloo,mpi")
    link_limit: bool = True
    env: Dict[str, str] = field(default_factory=dict)
    netns_hosts: bool = False  # ranks on namespace hosts (pycollect.netns) instead of loopback
    ranks_per_host: int = 1   # ... this many on each (world_size / ranks_per_host hosts)
    line_rate: str = "1gbit"  # those hosts' cables, each way (tc syntax)
    device: str = "cpu"  # "cuda": tensors on the GPU (rank r on cuda:r when there are enough, else cuda:0)
    algo: Optional[str] = None  # pycollect's algorithm for the timed op; None: the group's (PYCOLLECT_ALGO)
    compress: List[str] = field(default_factory=list)  # all-reduce wire formats timed beside: "bf16", "int8"


def compressed_names(cfg: Config) -> List[str]:
    """The engines of cfg.compress: pycollect's all-reduce in each format ("pycollect-int8")."""
    return [f"pycollect-{fmt}" for fmt in cfg.compress]


PEERS = ("gloo", "nccl", "mpi")


def peer_names(peer: Optional[str]) -> List[str]:
    """Config.peer as a list: "gloo,mpi" -> ["gloo", "mpi"]; None or "none" -> []."""
    names = [p.strip() for p in (peer or "").split(",") if p.strip() and p.strip() != "none"]
    bad = [p for p in names if p not in PEERS]
    if bad or len(set(names)) != len(names) or {"gloo", "nccl"} <= set(names):
        raise ValueError(f"peers are one or more of {', '.join(PEERS)} (not both gloo and nccl), got {peer!r}")
    return names


def _job(rank: int, n: int, emit, cfg: Config) -> None:
    """One rank's part: the link limit, then every size (pycollect is initialised)."""
    from . import linklimit, runner
    from .. import api as pc

    peers = [runner.Engine(f"pycollect-{fmt}", algo=cfg.algo, compress=fmt) for fmt in cfg.compress]
    peers += [runner.Engine(p) for p in peer_names(cfg.peer)]
    device = cfg.device
    if device == "cuda":
        import torch

        device = f"cuda:{rank % torch.cuda.device_count()}"
        torch.cuda.set_device(device)
    if rank == 0:
        emit("memcpy", linklimit.memcpy_bandwidth())
        emit("transport", sorted(set(pc.get_transport_info().values())))
    if cfg.link_limit and n > 1:
        limit = linklimit.measure(rank)
        if rank == 0:
            emit("link", limit)
    for row in runner.run(cfg.op, cfg.sizes, cfg.dtype, cfg.iters, cfg.warmup, cfg.repeats, peers,
                          runner.Engine("pycollect", algo=cfg.algo), rank, n, device):
        if rank == 0:
            emit("row", row)


def run(cfg: Config, json_path: Optional[str] = None, plot_path: Optional[str] = None,
        stream=None, timeout: float = 1800.0) -> Dict:
    """Run the benchmark; print the table as it goes (to `stream`, default the current
    sys.stdout); return {meta, rows, link_limit}."""
    stream = stream if stream is not None else sys.stdout
    from .. import launch

    peers = peer_names(cfg.peer)
    shown = compressed_names(cfg) + peers  # the columns beside pycollect's
    start_ranks = launch.run_ranks
    if "mpi" in peers:  # MPI's peer needs ranks that are MPI processes: mpirun starts them
        from . import mpi

        start_ranks = mpi.run_ranks
        if cfg.netns_hosts or cfg.device != "cpu":
            raise ValueError("--peer mpi runs on CPU tensors on loopback (no --device cuda, no --netns-hosts)")

    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores", "python": platform.python_version(),
            **asdict(cfg)}
    rows: List[Dict] = []
    link = memcpy = None
    line = netns.rate_bytes(cfg.line_rate) / 1e9 if cfg.netns_hosts else None
    hosts_n = cfg.world_size // cfg.ranks_per_host if cfg.netns_hosts else 1
    where = (f"{hosts_n} namespace hosts x {cfg.ranks_per_host} rank{'s' if cfg.ranks_per_host > 1 else ''}, "
             f"{cfg.line_rate} cables ({line:.3f} GB/s each way)" if cfg.netns_hosts else f"{cfg.world_size} ranks on loopback")
    print(f"# pycollect bench: {cfg.op}, {where}, {cfg.dtype} on {cfg.device}, "
          f"iters {cfg.iters} x {cfg.repeats} blocks (median), warm-up {cfg.warmup}, peer {','.join(peers) or 'none'}, "
          f"algo {cfg.env.get('PYCOLLECT_ALGO', 'auto')}"
          + (f", compressed beside: {', '.join(cfg.compress)}" if cfg.compress else ""),
          file=stream, flush=True)

    def on_event(rank: int, event: tuple) -> None:
        nonlocal link, memcpy
        kind, value = event
        if kind == "memcpy":
            memcpy = value
            print(f"# memcpy: {memcpy:.3f} GB/s (one rank copying 64 MiB)", file=stream, flush=True)
        elif kind == "transport":
            meta["links"] = "+".join(value) or "none"
            print(f"# links: {meta['links']} (PYCOLLECT_TRANSPORT={cfg.env.get('PYCOLLECT_TRANSPORT', 'auto')})",
                  file=stream, flush=True)
        elif kind == "link":
            link = value
            print(f"# link limit: {link:.3f} GB/s per direction", file=stream, flush=True)
        else:
            if not rows:
                print(report.header(cfg.op, shown), file=stream, flush=True)
            rows.append(value)
            print(report.format_row(value, shown), file=stream, flush=True)

    backends = ("pycollect",) + tuple(p for p in peers if p in ("gloo", "nccl"))
    with contextlib.ExitStack() as stack:
        hosts = stack.enter_context(netns.Hosts(hosts_n, cfg.line_rate)) if cfg.netns_hosts else None
        where = hosts.placement(cfg.world_size, cfg.ranks_per_host) if hosts else {}
        start_ranks(_job, cfg.world_size, backends, job_args=(cfg,), timeout=timeout, on_event=on_event, env=cfg.env,
                  **where)
    print(report.summary(rows, cfg.op, shown, link, line, memcpy,
                         hosts=hosts_n if cfg.netns_hosts and cfg.ranks_per_host > 1 else None),
          file=stream, flush=True)
    if cfg.compress and rows and cfg.op == "all_reduce":
        layout = [cfg.ranks_per_host] * hosts_n if cfg.netns_hosts else [cfg.world_size]
        print(report.compression_forecast(rows[-1]["size"], layout, cfg.compress, line), file=stream, flush=True)
    meta["link_limit_GBps"] = link
    meta["line_rate_GBps"] = line
    meta["memcpy_GBps"] = memcpy
    if json_path:
        report.write_json(json_path, meta, rows)
        print(f"# wrote {json_path}", file=stream)
    if plot_path and rows:
        network = f"namespace hosts, {cfg.line_rate} cables" if cfg.netns_hosts else f"loopback ({meta['machine']})"
        try:
            report.plot(plot_path, cfg.op, rows, shown, link,
                        f"{cfg.op}, {cfg.world_size} ranks, {cfg.dtype}, links {meta.get('links', '?')}, {network}",
                        memcpy)
            print(f"# wrote {plot_path}", file=stream)
        except ImportError as e:  # the table and the JSON are out already; say how to get the plot
            print(f"# no plot: {e.name or 'matplotlib'} is not installed (pip install 'pycollect[bench]', "
                  f"or matplotlib); the figures are in the table above" +
                  (f" and in {json_path}" if json_path else ""), file=stream)
    return {"meta": meta, "rows": rows, "link_limit": link}
