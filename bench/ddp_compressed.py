"""torch DDP with pycollect's compressed all-reduce hook (pycollect.hooks) against the exact
all-reduce: the loss curve and the step time of each, in the same run.

    .venv/bin/python bench/ddp_compressed.py                                  # 2 ranks, loopback
    sudo .venv/bin/python bench/ddp_compressed.py --netns-hosts 2 --ranks-per-host 2 \\
        --plot docs/img/ddp_compressed_netns.png

The model is a small GPT (pycollect.demo.gpt; --dim, --layers) learning the demo's
count-up sequences (pycollect.demo.models.batch "gpt-tiny": each rank its slice of the
step's batch). Replicas of it (same seed, same batches) are trained with torch's
DistributedDataParallel on one "pycollect" group: "exact" (DDP's own all-reduce), and one
per --hooks entry: "int8+ef" (compressed_allreduce_hook, int8, error feedback), "int8"
(without error feedback), "bf16+ef". Their steps are interleaved (the order turns each
step) so all see the same machine load. A step is zero_grad + forward + backward (DDP's
bucketed all-reduces) + Adam, timed on each rank after a barrier; the figure is the
slowest rank's. The loss is the mean over ranks. Printed: each replica's median step time
(quartiles), its loss at the start and the end, and the JSON and plot written.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pycollect.launch import run_ranks  # noqa: E402

HOOKS = {"int8+ef": ("int8", True), "int8": ("int8", False), "bf16+ef": ("bf16", True), "bf16": ("bf16", False)}


def job(rank: int, world: int, emit, args) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from pycollect.demo import models
    from pycollect.demo.gpt import GPT, GPTConfig
    from pycollect.hooks import CompressionState, compressed_allreduce_hook

    torch.set_num_threads(1)
    engine_pg = dist.new_group(backend="pycollect", timeout=datetime.timedelta(seconds=300))
    replicas = {}
    for name in ["exact", *args.hooks]:
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab=64, seq=32, dim=args.dim, layers=args.layers, heads=4, tied=False))
        ddp = DDP(model, process_group=engine_pg, bucket_cap_mb=args.bucket_mb)
        if name != "exact":
            fmt, feedback = HOOKS[name]
            ddp.register_comm_hook(CompressionState(compress=fmt, group=engine_pg, error_feedback=feedback),
                                   compressed_allreduce_hook)
        replicas[name] = (ddp, torch.optim.Adam(ddp.parameters(), lr=args.lr))
    nparams = sum(p.numel() for p in replicas["exact"][0].parameters())
    losses = {n: [] for n in replicas}
    times = {n: [] for n in replicas}
    for step in range(args.steps):
        x, y = models.batch("gpt-tiny", step, 0, world, rank)
        names = list(replicas) if step % 2 == 0 else list(replicas)[::-1]
        for name in names:
            ddp, opt = replicas[name]
            dist.barrier()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=False)
            loss = models.loss_fn("gpt-tiny", ddp(x), y)
            loss.backward()
            opt.step()
            took = time.perf_counter() - t0
            stats = torch.tensor([took, loss.item()], dtype=torch.float64)
            dist.all_reduce(stats[:1], op=dist.ReduceOp.MAX)
            dist.all_reduce(stats[1:], op=dist.ReduceOp.SUM)
            times[name].append(stats[0].item())
            losses[name].append(stats[1].item() / world)
    return dict(losses=losses, times=times, nparams=nparams)


def plot(path: str, out: dict, title: str) -> None:
    """Three panels: the loss curves, each replica's loss minus the exact one's, the median
    step times; one colour per replica throughout."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(out["times"])
    colors = dict(zip(names, ["#555555", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]))
    meds = {n: statistics.median(out["times"][n][out["warmup"]:]) * 1e3 for n in names}
    fig, (ax, dx, bx) = plt.subplots(1, 3, figsize=(13, 3.8), gridspec_kw={"width_ratios": [2, 2, 1]})
    exact = out["losses"]["exact"]
    for name in names:
        ls = out["losses"][name]
        ax.plot(range(len(ls)), ls, color=colors[name], label=f"{name} (median step {meds[name]:.0f} ms)")
        if name != "exact":
            dx.plot(range(len(ls)), [a - b for a, b in zip(ls, exact)], color=colors[name], label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (mean over ranks)")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    dx.axhline(0.0, color=colors["exact"], linewidth=0.8)
    dx.set_xlabel("step")
    dx.set_ylabel("loss - exact run's loss")
    dx.grid(True, alpha=0.3)
    dx.legend(fontsize=8)
    bx.bar(names, [meds[n] for n in names], color=[colors[n] for n in names])
    for i, n in enumerate(names):
        bx.text(i, meds[n], f"{meds[n]:.0f}", ha="center", va="bottom", fontsize=8)
    bx.set_ylabel("median step time (ms)")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the step-time medians")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb (torch's default 25)")
    p.add_argument("--hooks", default="int8+ef,int8", help=f"replicas beside the exact one: {', '.join(HOOKS)}")
    p.add_argument("--netns-hosts", type=int, default=0, metavar="H",
                   help="run the ranks on H network-namespace hosts (needs root and iproute2)")
    p.add_argument("--ranks-per-host", type=int, default=1, metavar="G", help="with --netns-hosts: ranks a host")
    p.add_argument("--line-rate", default="1gbit", help="with --netns-hosts: each host's cable, in tc's syntax")
    p.add_argument("--json", default=None, help="write losses and step times here")
    p.add_argument("--plot", default=None, help="write the loss curves and step times here (PNG)")
    p.add_argument("--replot", default=None, metavar="JSON", help="only draw --plot again from a run's --json")
    args = p.parse_args()
    if args.replot:
        with open(args.replot) as f:
            out = json.load(f)
        plot(args.plot, out, out["title"])
        return
    args.hooks = [h.strip() for h in args.hooks.split(",") if h.strip()]
    bad = [h for h in args.hooks if h not in HOOKS]
    if bad:
        raise SystemExit(f"--hooks: unknown {', '.join(bad)}; choose from {', '.join(HOOKS)}")
    from pycollect import netns

    args.world_size = netns.check_placement(args.netns_hosts, args.ranks_per_host, args.line_rate) or args.world_size
    with contextlib.ExitStack() as stack:
        hosts = stack.enter_context(netns.Hosts(args.netns_hosts, args.line_rate)) if args.netns_hosts else None
        where = hosts.placement(args.world_size, args.ranks_per_host) if hosts else {}
        out = run_ranks(job, args.world_size, ("gloo",), job_args=(args,), timeout=3600, **where)[0]
    out["warmup"] = args.warmup
    place = (f"{args.netns_hosts} namespace hosts x {args.ranks_per_host} ranks, {args.line_rate} cables"
             if args.netns_hosts else f"{args.world_size} ranks on loopback")
    title = (f"torch DDP on pycollect, {place}: GPT {out['nparams'] / 1e6:.1f} M params ({args.layers} x dim "
             f"{args.dim}), Adam lr {args.lr}, {args.steps} interleaved steps")
    print(f"# {title}")
    print(f"{'replica':>10} {'p25 (ms)':>9} {'median':>9} {'p75 (ms)':>9} {'loss[0]':>8} {'loss[-1]':>9} "
          f"{'mean loss last 10':>18}")
    for name, ts in out["times"].items():
        q = statistics.quantiles(ts[args.warmup:], n=4)
        ls = out["losses"][name]
        print(f"{name:>10} {q[0] * 1e3:9.1f} {q[1] * 1e3:9.1f} {q[2] * 1e3:9.1f} {ls[0]:8.4f} {ls[-1]:9.4f} "
              f"{statistics.mean(ls[-10:]):18.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"title": title, **out}, f)
        print(f"# wrote {args.json}")
    if args.plot:
        plot(args.plot, out, title)
        print(f"# wrote {args.plot}")


if __name__ == "__main__":
    main()
