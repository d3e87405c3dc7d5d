"""How float16 and bfloat16 sums accumulate: pycollect's all-reduce error against the exact
(float64) sum of the same inputs, beside Gloo's in the same run, and beside a sum that
accumulates in float32 and rounds once (what NCCL 2.27 does on GPUs; docs/torch_backend.md
"16-bit sums").

Every rank draws every rank's input from one seed (standard normal, rounded to the dtype),
so each computes the references itself. Two sizes: 1 KiB a rank (the direct algorithm up
to 8 ranks: every rank adds the inputs in rank order) and 2 MiB (the ring: each chunk's
partial sum travels, rounded to the dtype, from rank to rank). Printed per dtype and size:
the mean and largest absolute error, and the mean relative to the mean |exact sum|.

    .venv/bin/python bench/half_sums.py [--world-size 8]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pycollect.launch import run_ranks  # noqa: E402

COUNTS = (512, 1 << 20)


def _errors(got, exact):
    err = (got.double() - exact).abs()
    return err.mean().item(), err.max().item(), err.mean().item() / exact.abs().mean().item()


def _job(rank, world, emit):
    import torch
    import torch.distributed as dist

    import pycollect as pc

    out = {}
    for dtype in (torch.float16, torch.bfloat16):
        for count in COUNTS:
            xs = [torch.randn(count, generator=torch.Generator().manual_seed(1000 * k + count)).to(dtype)
                  for k in range(world)]
            exact = torch.stack([x.double() for x in xs]).sum(0)
            ours, gloo = xs[rank].clone(), xs[rank].clone()
            pc.all_reduce(ours)
            dist.all_reduce(gloo)
            fp32_once = torch.stack([x.float() for x in xs]).sum(0).to(dtype)
            out[str(dtype).replace("torch.", ""), count] = {
                "pycollect": _errors(ours, exact), "gloo": _errors(gloo, exact), "fp32, rounded once": _errors(fp32_once, exact)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world-size", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    results = run_ranks(_job, args.world_size, ("pycollect", "gloo"), timeout=args.timeout)
    print(f"{args.world_size} ranks; error against the float64 sum: mean | largest | mean relative")
    print(f"{'dtype':<9}{'elements':>9}  {'sum':<20}{'mean':>11}{'largest':>11}{'relative':>11}")
    for (dtype, count), rows in results[0].items():
        for name, (mean, largest, rel) in rows.items():
            print(f"{dtype:<9}{count:>9}  {name:<20}{mean:>11.3e}{largest:>11.3e}{rel:>11.3e}")


if __name__ == "__main__":
    main()
