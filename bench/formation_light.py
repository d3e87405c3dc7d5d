"""Formation with light ranks: N processes that import pycollect and numpy but not torch,
meeting in a DirStore (pycollect/dirstore.py) instead of torch's TCPStore, so that 128 or
256 ranks fit on a small machine (each costs ~20 MB, not torch's ~170). No Gloo here: it
needs torch; bench/formation.py compares the two up to 64 ranks.

Each rank, from one start instant the parent publishes once all are ready, times:

  form     pycollect.init_process_group
  +ar      the same, plus a first 1 MiB float32 all-reduce on the ring (algo="ring": the
           links it makes are its two neighbours')

then counts the descriptors its group holds (open after, less open before: a forked rank
inherits its parent's), its threads and resident memory (the ring-only figures), and with
--all-to-all runs an all-to-all, which needs a link to every peer, counts again, and sends
back what it received and reduced so the parent can check both against numpy.

    .venv/bin/python bench/formation_light.py -n 64 128 256
    .venv/bin/python bench/formation_light.py -n 64 --all-to-all --json /tmp/light.json
    .venv/bin/python bench/formation_light.py -n 32 64 128 256 --all-to-all \
        --plot docs/img/formation_links.png --beside formation.json   # bench/formation.py --json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import shutil
import statistics
import sys
import tempfile
import time
from typing import Optional

AR_ELEMS = (1 << 20) // 4  # 1 MiB of float32


def _status(fds_before: int = 0) -> dict:
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    return {"fds": len(os.listdir("/proc/self/fd")) - fds_before, "threads": int(fields["Threads"][0]),
            "rss_kib": int(fields["VmRSS"][0])}


def expected_all_reduce(n: int) -> float:
    """Every rank contributes rank + 1 in each element."""
    return n * (n + 1) / 2


def all_to_all_inputs(rank: int, n: int):
    import numpy as np

    return [np.array([rank * n + j], dtype=np.int64) for j in range(n)]


def _rank(rank: int, n: int, path: str, timeout_s: float, all_to_all: bool, out) -> None:
    try:
        import datetime

        import numpy as np

        import pycollect as pc
        import pycollect.api  # noqa: F401 - pycollect's API loads on first use: not on the clock
        from pycollect.dirstore import DirStore

        store = DirStore(path, datetime.timedelta(seconds=timeout_s))
        x = np.full(AR_ELEMS, rank + 1, dtype=np.float32)
        store.set(f"ready/{rank}", "1")
        t0 = float(store.get("start").decode())
        if time.time() < t0:
            time.sleep(t0 - time.time())
        before = len(os.listdir("/proc/self/fd"))
        pc.init_process_group(store=store, rank=rank, world_size=n, timeout=datetime.timedelta(seconds=timeout_s))
        formed = time.time() - t0
        pc.all_reduce(x, algo="ring")
        res = {"rank": rank, "form_s": formed, "ar_s": time.time() - t0, "ring": _status(before),
               "reduced": [float(x.min()), float(x.max())], "links_ring": len(pc.get_transport_info())}
        # Everyone has counted before anyone makes more links: a second ring all-reduce ends on
        # no rank before every rank has entered it.
        pc.all_reduce(np.zeros(1, dtype=np.float32), algo="ring")
        if all_to_all:
            outs = [np.zeros(1, dtype=np.int64) for _ in range(n)]
            pc.all_to_all(outs, all_to_all_inputs(rank, n))
            res["received"] = [int(o[0]) for o in outs]
            res["all"] = _status(before)
            res["links_all"] = len(pc.get_transport_info())
        pc.barrier()
        out.put(("done", rank, res))
        pc.destroy_process_group()
    except BaseException:
        import traceback

        out.put(("error", rank, traceback.format_exc()))


def run(n: int, timeout: float = 300.0, all_to_all: bool = False) -> list:
    """One formation of `n` light ranks; each rank's result dict, in rank order."""
    import numpy  # noqa: F401 - imported once here, inherited by every forked rank
    import pycollect.api  # noqa: F401
    from pycollect.dirstore import DirStore

    ctx = mp.get_context("fork")
    out = ctx.Queue()
    path = tempfile.mkdtemp(prefix=f"light-ranks-{n}-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        store = DirStore(path)
        procs = [ctx.Process(target=_rank, args=(r, n, path, timeout, all_to_all, out), daemon=True) for r in range(n)]
        for p in procs:
            p.start()
        results, deadline = {}, time.monotonic() + timeout

        def take(kind, rank, value) -> None:
            if kind == "error":
                raise RuntimeError(f"light rank {rank} of {n} failed:\n{value}")
            results[rank] = value

        waiting = [f"ready/{r}" for r in range(n)]
        while waiting:  # a rank that fails or dies before it is ready is reported, not waited for
            waiting = [k for k in waiting if not store.check([k])]
            try:
                take(*out.get(timeout=0.05))
            except queue.Empty:
                pass
            dead = [r for r, p in enumerate(procs) if p.exitcode is not None and r not in results]
            if dead:
                raise RuntimeError(f"light rank(s) {dead[:8]} of {n} exited (codes "
                                   f"{[procs[r].exitcode for r in dead[:8]]}) before the group formed")
            if time.monotonic() > deadline:
                raise TimeoutError(f"light ranks {waiting[:8]} of {n} not ready within {timeout:g} s")
        store.set("start", repr(time.time() + 0.2 + 0.01 * n))
        while len(results) < n:
            take(*out.get(timeout=max(1.0, deadline - time.monotonic())))
        for p in procs:
            p.join(30)
        return [results[r] for r in range(n)]
    finally:
        shutil.rmtree(path, ignore_errors=True)


def check(ranks: list) -> None:
    """The all-reduce and (when run) the all-to-all against numpy; raises AssertionError."""
    import numpy as np

    n = len(ranks)
    for r in ranks:
        assert r["reduced"] == [expected_all_reduce(n)] * 2, (r["rank"], r["reduced"])
        if "received" in r:
            want = np.array([a[r["rank"]][0] for a in (all_to_all_inputs(s, n) for s in range(n))])
            assert np.array_equal(np.array(r["received"]), want), (r["rank"], r["received"][:4])


def summarize(runs: list) -> dict:
    s = {"form_s": statistics.median(max(x["form_s"] for x in ranks) for ranks in runs),
         "ar_s": statistics.median(max(x["ar_s"] for x in ranks) for ranks in runs)}
    for phase in ("ring", "all"):
        if phase in runs[0][0]:
            for key in ("fds", "threads", "rss_kib"):
                values = [x[phase][key] for x in runs[-1]]
                s[f"{phase}_{key}"] = {"med": statistics.median(values), "max": max(values)}
    return s


def plot(table: dict, path: str, beside: Optional[dict] = None) -> None:
    """Time to form (and + the first all-reduce) vs ranks, and the descriptors a rank's group
    holds; `beside`: bench/formation.py's --json table (torch ranks, pycollect and Gloo)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from formation import label_axes, save_figure  # bench/formation.py, beside this file

    fig, (ax, fx) = plt.subplots(1, 2, figsize=(10, 4.2))
    ns = sorted(table)
    ax.plot(ns, [table[n]["form_s"] for n in ns], "o-", label="pycollect, light ranks: form")
    ax.plot(ns, [table[n]["ar_s"] for n in ns], "o-", alpha=0.4, label="  + first 1 MiB ring all-reduce")
    for engine, style in (("pycollect", "^-"), ("gloo", "s--")):
        ts = sorted(int(n) for n in (beside or {}) if (beside[n] or {}).get(engine))
        if ts:
            ax.plot(ts, [beside[str(n)][engine]["form_s"] for n in ts], style, label=f"{engine}, torch ranks: form")
    ax.set_xscale("log", base=2)
    label_axes(ax, "ranks (one machine, 2 cores)", "seconds, slowest rank (median of repeats)", "Time to form a group")
    fx.plot(ns, [table[n]["ring_fds"]["max"] for n in ns], "o-", label="after a ring all-reduce")
    if "all_fds" in table[ns[0]]:
        fx.plot(ns, [table[n]["all_fds"]["max"] for n in ns], "o--", label="after an all-to-all (every link)")
    fx.set_xscale("log", base=2)
    label_axes(fx, "ranks", "descriptors the group holds, busiest rank", "What a rank pays for its links")
    save_figure(fig, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", "--ranks", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("-r", "--repeats", type=int, default=3)
    ap.add_argument("--all-to-all", action="store_true", help="also run an all-to-all (every link) and check it")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--json", help="write the table here")
    ap.add_argument("--plot", help="PNG: time to form and descriptors vs ranks")
    ap.add_argument("--beside", help="with --plot: bench/formation.py's --json, drawn beside")
    args = ap.parse_args(argv)
    table = {}
    print(f"{'ranks':>5} {'form s':>7} {'+ar s':>7} {'group fds ring med/max':>23} {'threads':>7} {'RSS MiB':>8}"
          + (f" {'after all-to-all':>17}" if args.all_to_all else ""))
    for n in args.ranks:
        runs = []
        for rep in range(args.repeats):
            print(f"# {n} ranks, repeat {rep + 1}/{args.repeats}", file=sys.stderr, flush=True)
            ranks = run(n, args.timeout, args.all_to_all)
            check(ranks)
            runs.append(ranks)
        s = table[n] = summarize(runs)
        line = (f"{n:>5} {s['form_s']:>7.3f} {s['ar_s']:>7.3f} {s['ring_fds']['med']:>14.0f}/{s['ring_fds']['max']:<8.0f}"
                f" {s['ring_threads']['med']:>7.0f} {s['ring_rss_kib']['med'] / 1024:>8.1f}")
        if args.all_to_all:
            line += f" {s['all_fds']['med']:>7.0f}/{s['all_fds']['max']:<8.0f}"
        print(line, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({str(n): s for n, s in table.items()}, f, indent=1)
    if args.plot:
        beside = None
        if args.beside:
            with open(args.beside) as f:
                beside = json.load(f)["table"]
        plot(table, args.plot, beside)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
