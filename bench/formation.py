"""Formation at scale: how long N local ranks take to form a group, pycollect beside Gloo.

For each N (default 16 32 48 64; up to 256 with --allow-large) and each engine, in runs of
their own (the two never fight for the cores; the order alternates from repeat to repeat,
--repeats each, medians reported), N ranks are started as pycollect.launch.run_ranks starts
them (forked from a server that imported torch and pycollect once, with the parent's
environment). The parent hosts the TCPStore, as torchrun's agent does. Each rank connects
to the store, says it is ready, and waits for one wall-clock instant the parent publishes
once every rank is ready (no barrier in the engines under test). From that instant, each
rank times:

  form     `pycollect.init_process_group` / `torch.distributed.init_process_group("gloo")`
           (each engine's modules imported before the start: pycollect loads its API on
           first use, and before 2026-12-02 that import, 0.5-1.4 s for 16 ranks on 2 cores,
           was counted as formation; `import_s` in --json says what it costs)
  +ar      the same, plus a first 1 MiB all-reduce (float32)

and the CPU time its process spent forming (every thread; the table's "CPU ms" is the sum over
ranks, and rank 0's: with more ranks than cores, forming is bound by it), and afterwards
counts its open descriptors (/proc/self/fd), threads and VmRSS (plus PSS,
which shares out the pages the ranks inherit from the fork server: what the run costs the
machine, used to skip an engine at an N that would not fit in memory). The slowest rank
counts for the times; fds/threads/RSS are shown as median/max over the ranks.

--phases (pycollect only) also times, inside every rank, the steps of the formation by
wrapping them from the outside (nothing in pycollect is edited): ProcessGroup.__init__,
and of its Formation (pycollect/formation.py) connect's listen, _exchange (the store
rendezvous), _set_hierarchy, _connect_mesh and the C++ Communicator.connect inside it, and counts the store calls (get/set/wait/check/
delete_key/add: calls and bytes) each rank makes. --strace R traces rank R's syscalls
(strace -f; -c summary and a timestamped log of the connect/accept/shm calls) into
--strace-dir.

    .venv/bin/python bench/formation.py                      # 16 32 48 64, both engines
    .venv/bin/python bench/formation.py -n 16 64 --phases    # where pycollect's time goes
    .venv/bin/python bench/formation.py -n 128 256 --allow-large --plot docs/img/formation.png
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import queue as queue_mod
import shutil
import statistics
import subprocess
import sys
import threading
import time

ENGINES = ("pycollect", "gloo")
AR_ELEMS = (1 << 20) // 4  # 1 MiB of float32
STORE_METHODS = ("get", "set", "wait", "check", "delete_key", "add", "compare_set", "multi_get", "multi_set")


# ----------------------------------------------------------------------------- in the ranks
def _proc_status() -> dict:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Threads", "VmRSS"):
                out[k] = int(v.split()[0])
    pss = 0
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return {"fds": len(os.listdir("/proc/self/fd")), "threads": out.get("Threads", 0),
            "rss_kib": out.get("VmRSS", 0), "pss_kib": pss}


class CountingStore:
    """Stands in for the store a ProcessGroup is given: every call passes through, counted
    (calls, bytes sent and received, seconds spent)."""

    def __init__(self, inner, counts: dict):
        self._inner, self._counts = inner, counts

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name not in STORE_METHODS or not callable(attr):
            return attr
        counts = self._counts

        def counted(*args, **kwargs):
            c = counts.setdefault(name, {"calls": 0, "bytes_out": 0, "bytes_in": 0, "s": 0.0})
            c["calls"] += 1
            if name == "set" and len(args) > 1:
                v = args[1]
                c["bytes_out"] += len(v) if isinstance(v, (bytes, str)) else 0
            t = time.perf_counter()
            try:
                r = attr(*args, **kwargs)
            finally:
                c["s"] += time.perf_counter() - t
            if isinstance(r, (bytes, bytearray)):
                c["bytes_in"] += len(r)
            return r

        return counted


class TimedComm:
    """Stands in for the C++ Communicator during _connect_mesh: times connect()."""

    def __init__(self, inner, phases: dict, t0: float):
        self._inner, self._phases, self._t0 = inner, phases, t0

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name != "connect":
            return attr

        def connect(*args, **kwargs):
            t = time.time()
            try:
                return attr(*args, **kwargs)
            finally:
                e = time.time()
                self._phases["cxx_connect"] = e - t
                self._phases["cxx_connect_start"] = t - self._t0
                self._phases["cxx_connect_end"] = e - self._t0

        return connect


class _Start:
    """The common start instant, known only once the parent publishes it."""
    t = 0.0

    def __rsub__(self, other: float) -> float:
        return other - self.t


def _instrument(phases: dict, store_counts: dict, t0: "_Start") -> None:
    """Wrap ProcessGroup's formation steps (this rank's process only)."""
    from pycollect import formation as F, group as G

    PG, FM = G.ProcessGroup, F.Formation

    def timed(name, fn):
        def wrapper(self, *args, **kwargs):
            t = time.time()
            try:
                return fn(self, *args, **kwargs)
            finally:
                phases[name] = phases.get(name, 0.0) + time.time() - t
                phases[name + "_end"] = time.time() - t0
        return wrapper

    orig_init, orig_mesh = PG.__init__, FM._connect_mesh

    def init(self, name, store, *args, **kwargs):
        t = time.time()
        phases["pg_start"] = t - t0
        orig_init(self, name, CountingStore(store, store_counts), *args, **kwargs)
        phases["pg_init"] = time.time() - t

    def connect_mesh(self, *args, **kwargs):
        real = self._comm
        self._comm = TimedComm(real, phases, t0)
        try:
            return orig_mesh(self, *args, **kwargs)
        finally:
            self._comm = real

    from pycollect import api

    for fname in ("rendezvous", "listen_address"):
        fn = getattr(api, fname)
        setattr(api, fname, (lambda fn, fname: lambda *a, **k: timed(fname, lambda _s, *a, **k: fn(*a, **k))(None, *a, **k))(fn, fname))
    F.auto_tables = (lambda fn: lambda *a, **k: timed("auto_tables", lambda _s, *a, **k: fn(*a, **k))(None, *a, **k))(F.auto_tables)
    orig_ipg = api.init_process_group

    def init_process_group(*a, **k):
        phases["api_entry"] = time.time() - t0
        return orig_ipg(*a, **k)

    api.init_process_group = init_process_group
    import pycollect

    pycollect.init_process_group = init_process_group
    PG.__init__ = init
    FM.connect = timed("connect_total", FM.connect)
    FM._exchange = timed("exchange", FM._exchange)
    FM._set_hierarchy = timed("set_hierarchy", FM._set_hierarchy)
    FM._adopt_model = timed("adopt_model", FM._adopt_model)
    FM._connect_mesh = timed("connect_mesh", connect_mesh)


def _start_strace(rank: int, directory: str) -> list:
    """strace this process (all its threads, and those it starts): a -c summary and a
    timestamped log of the calls that make links. Returns the tracers."""
    pid = os.getpid()
    tids = [a for t in os.listdir(f"/proc/{pid}/task") for a in ("-p", t)]
    calls = "trace=socket,connect,accept4,poll,shm_open,ftruncate,mmap,munmap,shm_unlink,openat,pidfd_open,pidfd_getfd,eventfd2,sendto,recvfrom,close"
    tracers = [
        subprocess.Popen(["strace", "-f", "-c", "-o", os.path.join(directory, f"strace_c_rank{rank}.txt"), *tids],
                         stderr=subprocess.DEVNULL),
    ]
    time.sleep(0.5)  # attach before the start instant (two tracers cannot share a process)
    return tracers


def _rank_main(rank: int, n: int, engine: str, port: int, out, timeout_s: float, parent_env: dict,
               phases_on: bool, strace_rank: int, strace_dir: str, strace_mode: str) -> None:
    from pycollect.launch import adopt_environment, close_rank

    adopt_environment(parent_env, {})
    try:
        import torch
        import torch.distributed as dist

        import pycollect as pc

        t_import = time.perf_counter()
        import pycollect.api  # noqa: F401 - pycollect's API loads on first use: not on the clock, as torch.distributed is not
        import_s = time.perf_counter() - t_import

        torch.set_num_threads(1)
        td = datetime.timedelta(seconds=timeout_s)
        store = dist.TCPStore("127.0.0.1", port, None, is_master=False, timeout=td, wait_for_workers=False)
        phases, store_counts = {}, {}
        tracers = []
        if rank == strace_rank:
            if strace_mode == "c":
                tracers = _start_strace(rank, strace_dir)
            else:
                pid = os.getpid()
                tids = [a for t in os.listdir(f"/proc/{pid}/task") for a in ("-p", t)]
                tracers = [subprocess.Popen(
                    ["strace", "-f", "-ttt", "-e",
                     "trace=connect,accept4,shm_open,ftruncate,mmap,pidfd_getfd,poll",
                     "-o", os.path.join(strace_dir, f"strace_t_rank{rank}.txt"), *tids],
                    stderr=subprocess.DEVNULL)]
                time.sleep(0.5)
        start = _Start()
        if phases_on and engine == "pycollect":
            _instrument(phases, store_counts, start)
        x = torch.ones(AR_ELEMS)
        out.put(("event", rank, ("ready",)))
        store.wait(["start"])
        t0 = start.t = float(store.get("start").decode())
        late = time.time() - t0
        if late < 0:
            time.sleep(-late)
        phases["woke"] = time.time() - t0
        c0 = time.process_time()
        if engine == "pycollect":
            pc.init_process_group(store=dist.PrefixStore("pycollect", store), rank=rank, world_size=n, timeout=td)
        else:
            dist.init_process_group("gloo", store=dist.PrefixStore("gloo", store), rank=rank, world_size=n,
                                    timeout=td)
        formed = time.time() - t0
        cpu_s = time.process_time() - c0  # every thread of this rank, while it formed
        (pc if engine == "pycollect" else dist).all_reduce(x)
        reduced = time.time() - t0
        if float(x[0]) != n:
            raise AssertionError(f"all_reduce gave {float(x[0])}, expected {n}")
        res = {"rank": rank, "late_s": max(0.0, late), "form_s": formed, "ar_s": reduced, "import_s": import_s,
               "cpu_s": cpu_s, **_proc_status()}
        if phases_on and engine == "pycollect":
            res["phases"], res["store"] = phases, store_counts
        # Nobody leaves (closing links under a peer's last call) before everyone is done.
        if engine == "pycollect":
            pc.barrier()
        else:
            dist.barrier()
        for t in tracers:
            t.terminate()
        for t in tracers:
            t.wait(timeout=10)
        out.put(("done", rank, res))
    except BaseException:
        import traceback

        out.put(("error", rank, traceback.format_exc()))
    finally:
        close_rank()


# ----------------------------------------------------------------------------- in the parent
def run_once(n: int, engine: str, timeout: float = 300.0, phases: bool = False, strace_rank: int = -1,
             strace_dir: str = ".", strace_mode: str = "c", progress=None, cold_tables: bool = False) -> list:
    """One formation of `n` ranks on `engine`; each rank's result dict, in rank order.
    `cold_tables`: pycollect's rank 0 finds no automatic-choice tables kept on disk from an
    earlier formation (tuning/table_cache.py) and builds them, as on a machine's first run."""
    import tempfile

    import torch.distributed as dist

    from pycollect.launch import collect_processes, rank_context

    ctx = rank_context()
    out = ctx.Queue()
    # Port 0: the store binds a free port itself (one picked beforehand can be taken by a
    # rank of another run before the bind: EADDRINUSE).
    store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, timeout=datetime.timedelta(seconds=timeout),
                          wait_for_workers=False)
    port = store.port
    env = dict(os.environ)
    if cold_tables:
        env["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="formation-cold-")
    procs = [ctx.Process(target=_rank_main, args=(r, n, engine, port, out, timeout, env, phases,
                                                  strace_rank, strace_dir, strace_mode), daemon=True)
             for r in range(n)]
    for p in procs:
        p.start()
    ready = set()

    def on_event(rank, event):
        if event[0] == "ready":
            ready.add(rank)
            if len(ready) == n:
                # The common start: every rank is waiting; the margin lets all of them wake and
                # read it first (~10 ms of CPU each, on however few cores).
                store.set("start", repr(time.time() + 0.3 + 0.01 * n))

    try:
        return collect_processes(procs, out, timeout, on_event,
                                 lambda rank, tb: f"rank {rank} of {n} ({engine}) failed:\n{tb}",
                                 where=f" ({engine}, {n} ranks)", join_s=10)
    finally:
        del store
        if cold_tables:
            shutil.rmtree(env["XDG_CACHE_HOME"], ignore_errors=True)


def summarize(runs: list) -> dict:
    """Medians over repeats of: the slowest rank's times; per-rank resources (median, max)."""
    def med(f):
        return statistics.median(f(r) for r in runs)

    def over_ranks(key, kind):
        return med(lambda ranks: (statistics.median if kind == "med" else max)(x[key] for x in ranks))

    s = {"form_s": med(lambda ranks: max(x["form_s"] for x in ranks)),
         "ar_s": med(lambda ranks: max(x["ar_s"] for x in ranks)),
         "late_s": max(max(x["late_s"] for x in ranks) for ranks in runs),
         "import_s": med(lambda ranks: statistics.median(x.get("import_s", 0.0) for x in ranks)),
         "cpu_sum_s": med(lambda ranks: sum(x.get("cpu_s", 0.0) for x in ranks)),
         "cpu_rank0_s": med(lambda ranks: ranks[0].get("cpu_s", 0.0)),
         "repeats": len(runs),
         "form_each": [max(x["form_s"] for x in ranks) for ranks in runs]}
    for key in ("fds", "threads", "rss_kib", "pss_kib"):
        s[key] = {"med": over_ranks(key, "med"), "max": over_ranks(key, "max")}
    s["fds_rank0"] = med(lambda ranks: ranks[0]["fds"])
    return s


# The steps in the order they run (nested ones indented when printed), and derived rows.
PHASE_ORDER = [("woke", 0), ("api_entry", 0), ("rendezvous", 0), ("listen_address", 0), ("pg_start", 0), ("pg_init", 0), ("comm_construct", 1),
               ("connect_total", 1), ("listen", 2), ("exchange", 2), ("store_rendezvous", 3), ("adopt_model", 3),
               ("auto_tables", 4), ("set_hierarchy", 3), ("connect_mesh", 2), ("cxx_connect", 3),
               ("cxx_connect_start", 0), ("exchange_end", 0), ("cxx_connect_end", 0), ("connect_mesh_end", 0)]


def _derive(p: dict) -> dict:
    """Rows that are differences of the measured ones."""
    p = dict(p)
    if "pg_init" in p and "connect_total" in p:
        p["comm_construct"] = p["pg_init"] - p["connect_total"]
    if "connect_total" in p:
        p["listen"] = p["connect_total"] - p.get("exchange", 0) - p.get("connect_mesh", 0)
    if "exchange" in p:
        p["store_rendezvous"] = p["exchange"] - p.get("adopt_model", 0) - p.get("set_hierarchy", 0)
    return p


def phase_summary(ranks: list) -> dict:
    """--phases: per phase, rank 0's seconds, median and max over ranks; store calls likewise."""
    derived = [_derive(r.get("phases", {})) for r in ranks]
    have = {k for d in derived for k in d}
    ph = {}
    for k in [k for k, _ in PHASE_ORDER if k in have]:
        vals = [d.get(k, 0.0) for d in derived]
        ph[k] = {"rank0": vals[0], "med": statistics.median(vals), "max": max(vals)}
    st = {}
    for m in sorted({m for r in ranks for m in r.get("store", {})}):
        for field in ("calls", "bytes_in", "bytes_out", "s"):
            vals = [r["store"].get(m, {}).get(field, 0) for r in ranks]
            st[f"{m}.{field}"] = {"rank0": vals[0], "med": statistics.median(vals), "max": max(vals)}
    return {"phases": ph, "store": st}


def mem_available_kib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def fits(n: int, pss_kib: float) -> bool:
    """Whether n ranks of `pss_kib` each (the last run's largest) fit in 70% of what is free."""
    return n * pss_kib < 0.7 * mem_available_kib()


def print_table(table: dict, file=sys.stdout) -> None:
    hdr = (f"{'ranks':>5} {'engine':<9} {'form s':>7} {'+ar s':>7} {'fds med/max':>12} {'fds r0':>6} "
           f"{'thr med/max':>11} {'RSS MiB med/max':>16} {'PSS MiB med':>11} {'CPU ms sum/r0':>13} {'vs gloo':>7}")
    print(hdr, file=file)
    print("-" * len(hdr), file=file)
    for n in sorted(table):
        for engine in [e for e in ENGINES if e in table[n] or table[n].get("skipped", {}).get(e)]:
            s = table[n].get(engine)
            if s is None:
                print(f"{n:>5} {engine:<9} {'(skipped: would not fit in memory)':>40}", file=file)
                continue
            other = table[n].get("gloo")
            ratio = f"{s['form_s'] / other['form_s']:.2f}x" if engine == "pycollect" and other else ""
            print(f"{n:>5} {engine:<9} {s['form_s']:>7.3f} {s['ar_s']:>7.3f} "
                  f"{s['fds']['med']:>5.0f}/{s['fds']['max']:<6.0f} {s['fds_rank0']:>6.0f} "
                  f"{s['threads']['med']:>4.0f}/{s['threads']['max']:<6.0f} "
                  f"{s['rss_kib']['med'] / 1024:>7.0f}/{s['rss_kib']['max'] / 1024:<8.0f} "
                  f"{s['pss_kib']['med'] / 1024:>11.0f} "
                  f"{1e3 * s.get('cpu_sum_s', 0):>7.0f}/{1e3 * s.get('cpu_rank0_s', 0):<5.0f} {ratio:>7}", file=file)


def print_phases(n: int, ps: dict, file=sys.stdout) -> None:
    print(f"\npycollect phases at {n} ranks (seconds; pg_start and *_start/*_end: instants since the common "
          "start; the rest: durations)", file=file)
    print(f"  {'phase':<22} {'rank 0':>9} {'median':>9} {'max':>9}", file=file)
    depth = dict(PHASE_ORDER)
    for k, v in ps["phases"].items():
        label = "  " * depth.get(k, 0) + k
        print(f"  {label:<22} {v['rank0']:>9.4f} {v['med']:>9.4f} {v['max']:>9.4f}", file=file)
    print(f"  {'store (per rank)':<22} {'rank 0':>9} {'median':>9} {'max':>9}", file=file)
    for k, v in ps["store"].items():
        fmt = "{:>9.4f}" if k.endswith(".s") else "{:>9.0f}"
        print(f"  {k:<22} " + " ".join(fmt.format(v[x]) for x in ("rank0", "med", "max")), file=file)


def plot(table: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for engine, style in (("pycollect", "o-"), ("gloo", "s--")):
        ns = [n for n in sorted(table) if table[n].get(engine)]
        if ns:
            ax.plot(ns, [table[n][engine]["form_s"] for n in ns], style, label=f"{engine}: form")
            ax.plot(ns, [table[n][engine]["ar_s"] for n in ns], style, alpha=0.4,
                    label=f"{engine}: form + first 1 MiB all-reduce")
    label_axes(ax, "ranks (one machine)", "seconds, slowest rank (median of repeats)", "Time to form a group")
    save_figure(fig, path)


def label_axes(ax, xlabel: str, ylabel: str, title: str) -> None:
    """The formation plots' axes (here and in formation_light.py): labels, grid, legend."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def save_figure(fig, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", "--ranks", type=int, nargs="+", default=[16, 32, 48, 64])
    ap.add_argument("-r", "--repeats", type=int, default=3)
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    ap.add_argument("--allow-large", action="store_true", help="allow N above 64 (up to 256)")
    ap.add_argument("--phases", action="store_true", help="time pycollect's formation steps inside the ranks")
    ap.add_argument("--strace", type=int, default=-1, metavar="RANK", help="strace this rank (pycollect runs)")
    ap.add_argument("--strace-mode", choices=("c", "t"), default="c", help="c: -c summary; t: timestamped log")
    ap.add_argument("--strace-dir", default=".")
    ap.add_argument("--timeout", type=float, default=300.0, help="per run, seconds")
    ap.add_argument("--cold-tables", action="store_true",
                    help="pycollect's rank 0 builds its automatic-choice tables in every run, as on a machine's "
                         "first formation (default: kept on disk from the last, as on every later one)")
    ap.add_argument("--json", help="write the table (and phases) here")
    ap.add_argument("--plot", help="PNG of time to form vs ranks")
    args = ap.parse_args(argv)
    limit = 256 if args.allow_large else 64
    bad = [n for n in args.ranks if not 2 <= n <= limit]
    if bad or args.repeats < 1:
        ap.error(f"ranks must be in [2, {limit}] (--allow-large for up to 256) and repeats >= 1; got {args.ranks}")

    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"# formation: ranks {args.ranks}, {args.repeats} repeat(s), engines {args.engines}, "
          f"{os.cpu_count()} cores, load {load}, MemAvailable {mem_available_kib() // 1024} MiB, "
          f"pycollect's tables {'built in every run' if args.cold_tables else 'kept on disk'}", flush=True)
    table, phases, pss_seen = {}, {}, {e: 0.0 for e in ENGINES}
    for n in sorted(args.ranks):
        runs = {e: [] for e in args.engines}
        skipped = set()
        for rep in range(args.repeats):
            order = list(args.engines) if rep % 2 == 0 else list(reversed(args.engines))
            for engine in order:
                if engine in skipped:
                    continue
                guess = pss_seen[engine] or 150 * 1024  # per rank, before any run of that engine
                if not fits(n, guess):
                    print(f"  {n} ranks {engine}: skipped ({n} x {guess / 1024:.0f} MiB would not fit in "
                          f"{mem_available_kib() // 1024} MiB)", flush=True)
                    skipped.add(engine)
                    continue
                t = time.monotonic()
                ranks = run_once(n, engine, timeout=args.timeout, phases=args.phases and engine == "pycollect",
                                 strace_rank=args.strace if engine == "pycollect" else -1,
                                 strace_dir=args.strace_dir, strace_mode=args.strace_mode,
                                 cold_tables=args.cold_tables)
                runs[engine].append(ranks)
                pss_seen[engine] = max(pss_seen[engine], max(r["pss_kib"] for r in ranks))
                slow = max(r["form_s"] for r in ranks)
                late = max(r["late_s"] for r in ranks)
                print(f"  {n:>3} ranks {engine:<9} repeat {rep + 1}/{args.repeats}: form {slow:.3f} s, "
                      f"+ar {max(r['ar_s'] for r in ranks):.3f} s, fds r0 {ranks[0]['fds']}, "
                      f"run {time.monotonic() - t:.1f} s" + (f", a rank started {late:.3f} s late" if late > 0.01
                                                               else ""), flush=True)
                if args.phases and engine == "pycollect" and rep == 0:
                    phases[n] = phase_summary(ranks)
        table[n] = {e: summarize(runs[e]) for e in args.engines if runs[e]}
        if skipped:
            table[n]["skipped"] = {e: True for e in skipped}
    print()
    print_table(table)
    for n, ps in phases.items():
        print_phases(n, ps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": {"load": load, "cores": os.cpu_count(), "repeats": args.repeats,
                                "cold_tables": args.cold_tables,
                                "date": time.strftime("%Y-%m-%d %H:%M")},
                       "table": {str(n): v for n, v in table.items()},
                       "phases": {str(n): v for n, v in phases.items()}}, f, indent=1)
    if args.plot:
        plot(table, args.plot)
        print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
