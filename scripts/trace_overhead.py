"""Runs the benchmark alternately on a build with the trace hooks and one without
(scripts/trace_overhead.sh makes both) and prints what the hooks cost with tracing off.

Each round runs, in a rotating order, `pycollect bench` (pycollect only, one size) with:
  hooks       the normal build, tracing off (what every user runs)
  nohooks     built with -DPYCOLLECT_TRACE_HOOKS=OFF: the hooks compiled away
  tracing on  the normal build with PYCOLLECT_TRACE=1 (for scale: what tracing costs)
A run's figure is the benchmark's median block. The cost of the hooks is the median over
rounds of hooks / nohooks within a round (paired: both ran seconds apart), with the
rounds' spread beside it, since this machine's noise is of the order of the effect.

The A/B cannot resolve 1 % on a noisy machine, so the script also bounds the cost from
below the noise: scripts/hook_cost.cc times one hook's test (ns, tracing off), and one
traced call counts the hooks a call passes (each event is a hook; the hooks that record
no event, Context::setUnit and the second half of a reduce span, are at most as many
again, so the bound takes twice the events).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


# The runs start outside the checkout: from its root, `import pycollect` would find the
# sources (without the extension) before the build under test.
_NEUTRAL = tempfile.gettempdir()


def _check(python: str, hooks: bool) -> None:
    out = subprocess.run([python, "-c", "import pycollect._C as C; print(C.TRACE_HOOKS, C.__file__)"],
                         check=True, capture_output=True, text=True, cwd=_NEUTRAL).stdout.split()
    if out[0] != str(hooks):
        sys.exit(f"{python}: TRACE_HOOKS is {out[0]}, expected {hooks} ({out[1]})")
    print(f"# {python}: TRACE_HOOKS={out[0]} ({out[1]})")


def _hook_bound(python: str, hook_cc: str, size: str, world: int, median_us: float) -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    exe = os.path.join(root, "build", "hook_cost")
    subprocess.run(["g++", "-O3", "-std=c++17", "-I" + os.path.join(root, "csrc"), hook_cc,
                    os.path.join(root, "csrc", "trace", "recorder.cc"), "-o", exe], check=True)
    ns = float(subprocess.run([exe], check=True, capture_output=True, text=True).stdout)
    code = ("from pycollect.trace.job import run_trace; from pycollect.benchmark.sizes import parse_size; "
            f"r = run_trace('all_reduce', parse_size({size!r}), {world}); "
            "print(max(sum(1 for e in r.events if e.rank == q) for q in range(r.world_size)), r.algo)")
    events, algo = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True,
                                  cwd=_NEUTRAL).stdout.split()
    hooks = 2 * int(events)
    print(f"# bound: one hook costs {ns:.2f} ns with tracing off (scripts/hook_cost.cc); a {size} all_reduce "
          f"({algo}, {world} ranks) records {events} events per rank, so at most {hooks} hooks: "
          f"{hooks * ns / 1e3:.2f} us of {median_us:.0f} us = {hooks * ns / 1e3 / median_us * 100:.4f} %")


def _bench(python: str, env: dict, size: str, world: int, iters: int, repeats: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.json")
        subprocess.run([python, "-m", "pycollect", "bench", "-o", "all_reduce", "-g", str(world), "-b", size,
                        "-e", size, "-n", str(iters), "-r", str(repeats), "--peer", "none", "--no-link-limit",
                        "--json", path],
                       check=True, env={**os.environ, **env}, stdout=subprocess.DEVNULL, cwd=_NEUTRAL)
        with open(path) as f:
            rows = json.load(f)["rows"]
    return rows[0]["pycollect"]["time_us"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hooks", required=True, help="python of the build with the hooks")
    ap.add_argument("--nohooks", required=True, help="python of the build without them")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--size", default="64M")
    ap.add_argument("-g", "--world-size", type=int, default=2)
    ap.add_argument("-n", "--iters", type=int, default=10)
    ap.add_argument("-r", "--repeats", type=int, default=5)
    args = ap.parse_args()
    args.hooks, args.nohooks = os.path.abspath(args.hooks), os.path.abspath(args.nohooks)
    _check(args.hooks, True)
    _check(args.nohooks, False)
    variants = [("hooks", args.hooks, {"PYCOLLECT_TRACE": "0"}), ("nohooks", args.nohooks, {"PYCOLLECT_TRACE": "0"}),
                ("tracing on", args.hooks, {"PYCOLLECT_TRACE": "1"})]
    times = {name: [] for name, _, _ in variants}
    print(f"# all_reduce {args.size}, {args.world_size} ranks, {args.rounds} rounds of "
          f"{args.repeats} blocks x {args.iters} calls per variant; load {os.getloadavg()[0]:.2f}")
    for r in range(args.rounds):
        order = variants[r % 3:] + variants[:r % 3]
        for name, python, env in order:
            times[name].append(_bench(python, env, args.size, args.world_size, args.iters, args.repeats))
        print(f"round {r + 1}: " + "  ".join(f"{n} {times[n][-1]:.0f} us" for n, _, _ in variants), flush=True)
    base = times["nohooks"]
    print(f"\n{'variant':>11} {'median us':>10} {'min us':>9} {'max us':>9} {'paired ratio to nohooks (median, min..max)':>44}")
    for name, _, _ in variants:
        ratios = [t / b for t, b in zip(times[name], base)]
        print(f"{name:>11} {statistics.median(times[name]):>10.0f} {min(times[name]):>9.0f} {max(times[name]):>9.0f} "
              f"{statistics.median(ratios):>27.4f} ({min(ratios):.3f}..{max(ratios):.3f})")
    cost = statistics.median(t / b for t, b in zip(times["hooks"], base)) - 1
    print(f"# hooks with tracing off: {cost * 100:+.2f} % against the build without them "
          f"(target < 1 %); load {os.getloadavg()[0]:.2f}")
    _hook_bound(args.hooks, os.path.join(os.path.dirname(os.path.abspath(__file__)), "hook_cost.cc"), args.size,
                args.world_size, statistics.median(times["hooks"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
