"""torch DDP (or FSDP2) step time on the "pycollect" backend against "gloo", in the same run.

    python bench/bench_torch_ddp.py                      # 2 ranks, ~21M-param MLP
    python bench/bench_torch_ddp.py --width 1024 --steps 10
    python bench/bench_torch_ddp.py --wrap fsdp2         # torch's fully_shard per layer + root
    sudo python bench/bench_torch_ddp.py --netns-hosts 2 --ranks-per-host 2   # across hosts

With --netns-hosts H the ranks run G to a host on H network-namespace hosts
(pycollect.netns: shared memory within a host, a --line-rate cable each way between),
where the engine's all-reduces run hierarchically (docs/hierarchy.md) and Gloo's flat.

The ranks are started by pycollect.launch.run_ranks with Gloo as the default
group; each also opens a "pycollect" group over the same ranks
(dist.new_group(backend="pycollect")). Two copies of the same model (same seed) are wrapped in torch's
DistributedDataParallel, one per group, and trained on the same batches; their
steps are interleaved (the order alternates every round) so both see the same
machine load. A step is zero_grad + forward + backward (with DDP's bucketed
all-reduces) + SGD step, timed on each rank after a barrier; the figure is the
median over rounds of the slowest rank's time. Printed: medians, quartiles,
the ratio pycollect / gloo (target <= 1.0), the engine's own operation counts
(proof the pycollect steps ran on pycollect) and the largest parameter difference
between the two replicas after training.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pycollect.launch import run_ranks  # noqa: E402


def make_model(width: int, layers: int) -> torch.nn.Module:
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*blocks, torch.nn.Linear(width, 10))


def timed_step(model, opt, x, y, group) -> float:
    dist.barrier(group=group)
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=False)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    return time.perf_counter() - t0


def job(rank: int, world_size: int, emit, args) -> dict:
    """One rank (the Gloo default group is up): torch DDP on a "pycollect" group and on Gloo."""
    import pycollect.torch_backend as tb

    torch.set_num_threads(args.threads)
    engine_pg = dist.new_group(backend="pycollect", timeout=datetime.timedelta(seconds=300))
    groups = {"pycollect": engine_pg, "gloo": dist.group.WORLD}
    from torch.nn.parallel import DistributedDataParallel as DDP

    models, opts = {}, {}
    for name, group in groups.items():
        torch.manual_seed(0)
        if args.wrap == "fsdp2":  # torch's FSDP2: each Linear its own unit, then the root
            from torch.distributed.device_mesh import DeviceMesh
            from torch.distributed.fsdp import fully_shard

            mesh = DeviceMesh.from_group(group, "cpu")
            model = make_model(args.width, args.layers)
            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer, mesh=mesh)
            models[name] = fully_shard(model, mesh=mesh)
        else:
            models[name] = DDP(make_model(args.width, args.layers), process_group=group,
                               bucket_cap_mb=args.bucket_mb)
        opts[name] = torch.optim.SGD(models[name].parameters(), lr=1e-3)
    nparams = sum(p.numel() for p in models["gloo"].parameters())
    gen = torch.Generator().manual_seed(rank)
    batches = [(torch.randn(args.batch, args.width, generator=gen), torch.randint(0, 10, (args.batch,), generator=gen))
               for _ in range(4)]
    times = {name: [] for name in groups}
    engine_before = dict(tb.engine_group(engine_pg).counters())
    for step in range(args.warmup + args.steps):
        x, y = batches[step % len(batches)]
        order = list(groups) if step % 2 == 0 else list(groups)[::-1]
        for name in order:
            t = timed_step(models[name], opts[name], x, y, groups[name])
            slowest = torch.tensor([t], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=groups["gloo"])
            if step >= args.warmup:
                times[name].append(slowest.item())
    engine = {k: v - engine_before.get(k, 0) for k, v in tb.engine_group(engine_pg).counters().items()
              if v != engine_before.get(k, 0)}
    def full(p):
        return p.full_tensor() if hasattr(p, "full_tensor") else p  # FSDP2's DTensor shards

    diff = max((full(a) - full(b)).abs().max().item()
               for a, b in zip(models["pycollect"].parameters(), models["gloo"].parameters()))
    group = tb.engine_group(engine_pg)
    return dict(times=times, nparams=nparams, engine=engine, diff=diff, topology=str(group.topology),
                hierarchical_from=dict(group.hierarchical_from))


def quartiles(xs):
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return q[0], statistics.median(xs), q[2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--layers", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb (torch's default 25)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--wrap", choices=("ddp", "fsdp2"), default="ddp", help="torch DDP or torch FSDP2 (fully_shard)")
    p.add_argument("--netns-hosts", type=int, default=0, metavar="H",
                   help="run the ranks on H network-namespace hosts (needs root and iproute2)")
    p.add_argument("--ranks-per-host", type=int, default=1, metavar="G", help="with --netns-hosts: ranks a host")
    p.add_argument("--line-rate", default="1gbit", help="with --netns-hosts: each host's cable, in tc's syntax")
    args = p.parse_args()
    from pycollect import netns

    try:
        args.world_size = netns.check_placement(args.netns_hosts, args.ranks_per_host, args.line_rate) or args.world_size
    except ValueError as e:
        raise SystemExit(str(e)) from None

    try:
        with contextlib.ExitStack() as stack:
            hosts = stack.enter_context(netns.Hosts(args.netns_hosts, args.line_rate)) if args.netns_hosts else None
            where = hosts.placement(args.world_size, args.ranks_per_host) if hosts else {}
            out = run_ranks(job, args.world_size, ("gloo",), job_args=(args,), timeout=1800, **where)[0]
    except (RuntimeError, TimeoutError) as e:
        raise SystemExit(f"a rank failed: {e}")
    where = (f"{args.netns_hosts} namespace hosts x {args.ranks_per_host} ranks, {args.line_rate} cables"
             if args.netns_hosts else "loopback")
    print(f"# {where}; topology {out['topology']}; the engine runs hierarchically from (bytes): "
          f"{out['hierarchical_from'] or 'never (one host)'}")
    print(f"torch {args.wrap.upper()}, torch {torch.__version__}, {args.world_size} ranks, model {out['nparams'] / 1e6:.1f} M params "
          f"({args.layers} x Linear({args.width}, {args.width}) + head), batch {args.batch}, "
          f"bucket_cap_mb {args.bucket_mb}, {args.steps} interleaved steps after {args.warmup} warm-up")
    print(f"{'backend':>10} {'p25 (ms)':>10} {'median (ms)':>12} {'p75 (ms)':>10}")
    med = {}
    for name, ts in out["times"].items():
        lo, med[name], hi = quartiles(ts)
        print(f"{name:>10} {lo * 1e3:10.1f} {med[name] * 1e3:12.1f} {hi * 1e3:10.1f}")
    print(f"ratio pycollect / gloo (median step time): {med['pycollect'] / med['gloo']:.3f}x  (target <= 1.0)")
    print(f"pycollect engine ops during the run: {out['engine']}")
    print(f"max |param difference| pycollect vs gloo replica after training: {out['diff']:.3g}")


if __name__ == "__main__":
    main()
