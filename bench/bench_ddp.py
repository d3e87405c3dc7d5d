"""DDP step time: pycollect's DistributedDataParallel against torch DDP over Gloo, in the same run.

    python bench/bench_ddp.py                       # 2 ranks, ~20M-parameter MLP, 15 rounds
    python bench/bench_ddp.py --params-m 40 --steps 10 --world-size 3

The ranks are spawned once. Each one holds two copies of the same model (same seed):
one wrapped in pycollect.DistributedDataParallel on pycollect's default group, one in
torch.nn.parallel.DistributedDataParallel on a Gloo group. Both train on the same
batches, and their steps are interleaved: each round runs one step of each, and the
order alternates from round to round, so both see the same machine load. A step is
zero_grad + forward + backward (the bucketed all-reduces, same bucket cap on both sides)
+ SGD step. Each step is timed on every rank after a barrier, and the figure is the
median, over rounds, of the slowest rank's time. Warm-up rounds are not counted.
Printed: median, 10th and 90th percentiles, the ratio pycollect / Gloo (target <= 1.0),
and the largest parameter difference between the two copies after training.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pycollect.launch import run_ranks  # noqa: E402

ENGINES = ("pycollect", "gloo")
LABELS = {"pycollect": "pycollect DDP", "gloo": "torch DDP/Gloo"}


def make_model(width: int, layers: int):
    import torch
    from torch import nn

    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*blocks)


def _rank(rank: int, world_size: int, emit, width: int, layers: int, rows: int, warmup: int, steps: int,
          cap_mb: float):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as TorchDDP

    from pycollect.ddp import DistributedDataParallel

    models = {"pycollect": DistributedDataParallel(make_model(width, layers), bucket_cap_mb=cap_mb),
              "gloo": TorchDDP(make_model(width, layers), bucket_cap_mb=cap_mb)}
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in models.items()}
    gen = torch.Generator().manual_seed(1 + rank)
    times = {k: [] for k in ENGINES}
    for rnd in range(warmup + steps):
        x = torch.randn(rows, width, generator=gen)
        order = ENGINES if rnd % 2 == 0 else ENGINES[::-1]
        for k in order:
            dist.barrier()
            t0 = time.perf_counter()
            opts[k].zero_grad(set_to_none=True)
            models[k](x).square().mean().backward()
            opts[k].step()
            if rnd >= warmup:
                times[k].append(time.perf_counter() - t0)
    diff = max(float((a - b).detach().abs().max()) for a, b in zip(models["pycollect"].parameters(),
                                                           models["gloo"].parameters()))
    return {"times": times, "diff": diff, "buckets": models["pycollect"].bucket_sizes()}


def _pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--params-m", type=float, default=20.0, help="model size in millions of parameters (~)")
    ap.add_argument("--width", type=int, default=2048, help="width of each Linear layer")
    ap.add_argument("--rows", type=int, default=16, help="batch rows per rank")
    ap.add_argument("--steps", type=int, default=15, help="timed rounds (one step of each engine per round)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0, help="bucket cap of both DDPs (default: 25)")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args(argv)
    layers = max(1, round(args.params_m * 1e6 / (args.width * args.width + args.width)))
    n_params = layers * (args.width * args.width + args.width)
    print(f"DDP step time: {args.world_size} ranks on 127.0.0.1, MLP {layers} x Linear({args.width}, {args.width}) "
          f"= {n_params / 1e6:.2f} M parameters ({n_params * 4 / 1e6:.1f} MB of fp32 gradients), "
          f"{args.rows} rows per rank, SGD, {args.steps} rounds after {args.warmup} warm-up", flush=True)
    t0 = time.perf_counter()
    results = run_ranks(_rank, args.world_size, ("pycollect", "gloo"), timeout=args.timeout,
                        job_args=(args.width, layers, args.rows, args.warmup, args.steps, args.bucket_cap_mb))
    # Per round, the slowest rank decides the step time.
    per_round = {k: [max(r["times"][k][i] for r in results) * 1e3 for i in range(args.steps)] for k in ENGINES}
    med = {k: statistics.median(v) for k, v in per_round.items()}
    print(f"pycollect buckets (MB): {[round(b / 1e6, 1) for b in results[0]['buckets']]}; "
          f"torch DDP: {args.bucket_cap_mb:g} MB cap, same rule")
    print(f"{'engine':<18}{'median ms':>11}{'p10 ms':>10}{'p90 ms':>10}")
    for k in ENGINES:
        print(f"{LABELS[k]:<18}{med[k]:>11.1f}{_pct(per_round[k], 0.1):>10.1f}{_pct(per_round[k], 0.9):>10.1f}")
    ratio = med["pycollect"] / med["gloo"]
    print(f"ratio pycollect / Gloo (median step time): {ratio:.2f}  (target <= 1.00)")
    print(f"largest parameter difference between the two copies: {max(r['diff'] for r in results):.3g}; "
          f"wall {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
