"""What the flight recorder costs a small call, measured two ways (docs/flight.md).

1. In the same processes: 2 local ranks make two groups over the same ranks, one with the
   recorder off (PYCOLLECT_FLIGHT_ENTRIES=0) and one with it on (the default 1024), and
   time 8-byte all-reduces on each in alternating blocks (ABBA), each call on its own;
   the medians per call (the slower rank's) and their difference.
2. The recorder's own work for such a call (issue, start, two steps and waits, end) in a
   C++ loop (bench/flight_cost.cc), built here with the system's g++.

    .venv/bin/python bench/flight_cost.py [--blocks 20] [--iters 500]
"""
import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def job(rank, world, emit, iters, blocks):
    import torch

    import pycollect as pc
    from pycollect.options import Options

    base = Options.from_env()
    groups = {mode: pc.new_group(timeout=60, pg_options=dataclasses.replace(base, flight_entries=entries))
              for mode, entries in (("off", 0), ("on", 1024))}
    t = torch.ones(2)
    times = {"off": [], "on": []}
    for b in range(blocks):
        for mode in (("off", "on") if b % 2 == 0 else ("on", "off")):
            g = groups[mode]
            for _ in range(20):
                pc.all_reduce(t, group=g)
            for _ in range(iters):
                t0 = time.perf_counter()
                pc.all_reduce(t, group=g)
                times[mode].append(time.perf_counter() - t0)
    recorded = len(groups["on"]._comm.flight_record()), len(groups["off"]._comm.flight_record())
    return {m: statistics.median(v) * 1e6 for m, v in times.items()}, recorded


def recorder_ns() -> float:
    exe = os.path.join(tempfile.mkdtemp(), "flight_cost")
    root = os.path.dirname(HERE)
    subprocess.run(["g++", "-O2", "-std=c++17", f"-I{root}/csrc", f"{HERE}/flight_cost.cc",
                    f"{root}/csrc/trace/flight.cc", "-o", exe, "-pthread"], check=True)
    return float(subprocess.run([exe], capture_output=True, text=True, check=True).stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=20)
    ap.add_argument("--iters", type=int, default=500)
    args = ap.parse_args()
    from pycollect.launch import run_ranks

    results = run_ranks(job, 2, ["pycollect"], job_args=(args.iters, args.blocks), timeout=600)
    off = max(r[0]["off"] for r in results)
    on = max(r[0]["on"] for r in results)
    kept = results[0][1]
    ns = recorder_ns()
    load = os.getloadavg()[0]
    print(f"8 B all-reduce, 2 local ranks, {args.blocks} blocks x {args.iters} calls each way, load {load:.1f}")
    print(f"  recorder off: {off:6.2f} us per call (median)")
    print(f"  recorder on:  {on:6.2f} us per call (median; it kept {kept[0]} entries, the other group {kept[1]})")
    print(f"  difference:   {on - off:+6.2f} us per call")
    print(f"  the recorder's own work per call (bench/flight_cost.cc): {ns:.0f} ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
