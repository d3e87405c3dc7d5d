"""The accuracy of all_reduce(compress=...): max and mean error against a float64 sum, at
2, 4 and 8 ranks, for each wire format (and the exact float32 all-reduce beside), with the
largest error as a share of the stated bound (pycollect.compression.error_bound; <= 1 is
within it). Ranks on loopback, the compressed ring over the group (k = ranks).

    .venv/bin/python bench/compression_accuracy.py [--count 1000003] [--ranks 2,4,8]

Inputs: every rank's values are normal with a scale that varies by position (e^U(-3, 3)),
so int8's blocks differ in range (--spread 0: plain standard normal); seeded, so every
rank knows every input.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

FORMATS = (None, "bf16", "int8")


def inputs(n: int, count: int, spread: float, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scale = np.exp(rng.uniform(-spread, spread, count))
    return (rng.standard_normal((n, count)) * scale).astype(np.float32)


def job(rank: int, n: int, emit, count: int, spread: float):
    import torch

    import pycollect as pc
    from pycollect.compression import error_bound

    xs = inputs(n, count, spread)
    exact = xs.astype(np.float64).sum(axis=0)
    a = np.abs(xs.astype(np.float64)).sum(axis=0)
    out = {}
    for fmt in FORMATS:
        t = torch.from_numpy(xs[rank].copy())
        pc.all_reduce(t, compress=fmt, algo="ring")
        err = np.abs(t.numpy().astype(np.float64) - exact)
        b = error_bound(a, fmt or "none", n, n)
        out[fmt or "none"] = (float(err.max()), float(err.mean()), float((err / b).max()),
                              float(err.mean() / np.abs(exact).mean()))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1_000_003, help="float32 values per rank")
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--spread", type=float, default=3.0,
                    help="scales e^U(-spread, spread) by position (0: plain standard normal values)")
    args = ap.parse_args()
    from pycollect.launch import run_ranks

    print("| ranks | format | max error | mean error | mean error / mean abs(sum) | max error / bound |")
    print("|---|---|---|---|---|---|")
    for n in (int(x) for x in args.ranks.split(",")):
        res = run_ranks(job, n, ("pycollect",), job_args=(args.count, args.spread), timeout=600)
        for fmt in ("none", "bf16", "int8"):
            mx, mean, share, rel = res[0][fmt]
            assert all(r[fmt] == res[0][fmt] for r in res), "ranks differ"
            print(f"| {n} | {fmt if fmt != 'none' else 'float32 (exact ring)'} | {mx:.3g} | {mean:.3g} | {rel:.2e} | "
                  f"{share:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
