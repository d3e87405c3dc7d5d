"""`pycollect model`: fit, validate and ask the alpha-beta-gamma cost model (pycollect.costmodel).

    pycollect model --fit --probe                          quick ping-pong + reduce-kernel probe
    pycollect model --fit --from bench/results/*.json      least squares on benchmark runs
    pycollect model --validate [--quick]                   predicted vs measured, 2-4 ranks
    pycollect model --validate --netns-hosts [--out F]     the same on 1 Gbit/s namespace hosts, against
                                                           parameters first fitted on those links
    torchrun --nnodes 2 --nproc-per-node 1 ... -m pycollect model --fit --inter-host --out F
                                                           the links between two real hosts, fitted
                                                           from inside the job: the model with them
    pycollect model --compare --from A.json B.json         two measurements, point by point: the floor
    pycollect model --predict -o all_reduce -s 1G -g 8..4096 --alpha 5us --beta 400gbit --plot p.png
    pycollect model --formation [-g 256..16384] [--store-rtt 100us] [--plot f.png]
                                                           forming a group at scale, on paper: store
                                                           requests, bytes, connections (model_formation.py)

--validate --netns-hosts measures links that no loopback fit describes, so unless
parameters are given (--params, --alpha, --beta, --gamma, --overhead, --overlap) it first
probes two namespace hosts with --line-rate cables and fits alpha, beta, overhead and
overlap to them, gamma timed (costmodel.measure.probe_links); it prints what it fitted and
from what, then validates against those parameters. A failed probe or fit ends the
command (exit 2) naming the step; it never falls back to other parameters. The fit is
not saved unless --out names a file (never the loopback model's default file): it then
holds the model the engine would use (PYCOLLECT_MODEL's, else the built-in defaults) with
the fitted links as its `inter_host`, the links between hosts, so that PYCOLLECT_MODEL=FILE
makes the automatic choice run the hierarchical collectives by them (docs/hierarchy.md).
--validate --from measures nothing and fits nothing.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Optional

from ..costmodel import DEFAULT_PATH, DEFAULT_SEGMENT_BYTES, FORMULAS, Params, bus_bandwidth
from ..tuning.arena import ALGO as ARENA_ALGO
from ..costmodel.check import (CHOICE_TARGET, LOOPBACK_TARGET, arena_check, choice_check, compare,
                               parse_world_sizes, prediction_table, saved_rows, summarize)
from ..measuring import format_size, parse_size, size_list
from ._params import add_param_arguments, params_from_args, params_given
from .model_formation import add_formation_arguments, run_formation
from .model_plot import predict_plot, validate_plot


def register(subparsers) -> None:
    p = subparsers.add_parser("model", help="the alpha-beta-gamma cost model: fit, validate, what-if",
                              description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--fit", action="store_true", help="fit alpha, beta, gamma and write them to --out")
    mode.add_argument("--validate", action="store_true", help="benchmark each algorithm, print predicted vs measured")
    mode.add_argument("--predict", action="store_true", help="predicted time and busbw per world size")
    mode.add_argument("--compare", action="store_true",
                      help="two `--validate --json` files, point by point: how closely the machine repeats itself, "
                           "the floor under the model's error")
    mode.add_argument("--formation", action="store_true",
                      help="forming a group of 256 to 16384 ranks, on paper: store requests, bytes and server time, "
                           "connections per rank, for pycollect beside Gloo and NCCL's bootstrap")
    p.add_argument("--from", dest="sources", nargs="+", default=[], metavar="JSON",
                   help="--fit: `pycollect bench --json` files (all-reduce runs need --algo); --validate: the "
                        "samples of earlier `--validate --json` runs, checked against the parameters without "
                        "measuring again; --compare: the two files to compare")
    p.add_argument("--probe", action="store_true", help="--fit: a quick 2-rank probe instead of files")
    p.add_argument("--inter-host", action="store_true",
                   help="--fit, run under torchrun --nnodes 2 --nproc-per-node 1: probe the link between the two "
                        "hosts and write, to --out (required), the engine's model with it as its links between "
                        "hosts (inter_host): PYCOLLECT_MODEL=F then makes the automatic choice of the "
                        "hierarchical collectives by that network")
    p.add_argument("--out", default=None,
                   help=f"--fit: where to write (default {DEFAULT_PATH}); --validate --netns-hosts: also write the "
                        f"engine's model with the links fitted there as its links between hosts (inter_host) here "
                        f"(by default not saved; never to the default above)")
    p.add_argument("--quick", action="store_true", help="--validate: 2 ranks, all-reduce ring/direct, 2 sizes")
    p.add_argument("--sizes", default=None, help="--validate: MIN..MAX in x4 steps (default 64K..64M)")
    p.add_argument("--block-ms", type=float, default=10.0,
                   help="--validate: calls per block fill this long (default 10 ms; at least 1 call)")
    p.add_argument("--repeats", type=int, default=7,
                   help="--validate: blocks per algorithm and size, interleaved (default 7); the fastest is compared")
    p.add_argument("--launches", type=int, default=5,
                   help="--validate: rounds over the whole grid, one set of ranks per op and group size in "
                        "each; each point keeps its fastest (default 5)")
    p.add_argument("--netns-hosts", action="store_true",
                   help="--validate: one rank per network-namespace host (root; a steady, rate-limited link); "
                        "unless parameters are given, they are first fitted on these links (a probe of 2 hosts)")
    p.add_argument("--line-rate", default="1gbit", help="--validate --netns-hosts: each cable's rate (tc syntax)")
    p.add_argument("-o", "--op", default="all_reduce", choices=sorted(FORMULAS))
    p.add_argument("-s", "--size", default="1G", help="--predict: bytes (per rank; total for all_gather / reduce_scatter)")
    p.add_argument("-g", "--world-sizes", default=None,
                   help="ranks: 2,3,4 or 8..4096 (doubling), 8..64+8 (adding 8), 8..4096*4 (x4); "
                        "default 8..4096 for --predict, 2,3,4 for --validate, 256..16384 for --formation")
    p.add_argument("--algos", nargs="+", default=None, help="algorithms to compare (default: every one the model knows)")
    p.add_argument("--plot", default=None,
                   help="--predict: time and busbw per world size; --validate: each algorithm's error per size, "
                        "one panel per group size, the targets shaded (a PNG); --compare: the same for the two files; "
                        "--formation: predicted time per scheme against ranks, log-log")
    p.add_argument("--json", default=None, help="--validate: also write the measured samples here (a --fit --from source)")
    add_param_arguments(p)
    add_formation_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    try:
        if args.fit:
            return _fit(args)
        if args.validate:
            return _validate(args)
        if args.compare:
            return _compare(args.sources, args.plot)
        if args.formation:
            return run_formation(args)
        return _predict(args)
    except (ValueError, NotImplementedError) as e:
        print(f"pycollect model: {e}", file=sys.stderr)
        return 2


def _fit(args) -> int:
    from ..costmodel.fit import fit, samples_from_bench

    if args.inter_host:
        return _fit_inter_host(args.out)
    if bool(args.sources) == bool(args.probe):
        raise ValueError("--fit needs --from JSON... or --probe (one of them)")
    if args.probe:
        from ..costmodel.measure import probe

        params, err, samples = probe()
        what = f"probe ({len(samples)} points at 2 ranks)"
    else:
        samples = []
        for path in args.sources:
            with open(path) as f:
                samples += samples_from_bench(json.load(f))
        params, err = fit(samples, cores=os.cpu_count())
        params = params.with_(source=f"fit of {len(args.sources)} file(s)")
        what = f"{len(samples)} rows of {', '.join(args.sources)}"
    print(f"# fitted from {what}: rms relative error {err * 100:.1f} %")
    print(f"# {params.describe()}")
    _save(params, args.out or DEFAULT_PATH, what, err)
    return 0


def _save(params: Params, path: str, what: str, err: float) -> None:
    """Write fitted `params` to `path`, with what they were fitted from and their error."""
    params.save(path, {"fitted_from": what, "rms_relative_error": err})
    print(f"# wrote {path} (use it: PYCOLLECT_MODEL={path})")


def _refuse_default(out: str, what: str) -> None:
    """A fit of links never goes to the loopback model's file (DEFAULT_PATH)."""
    if os.path.abspath(out) == os.path.abspath(DEFAULT_PATH):
        raise ValueError(f"--out {out}: that file is the loopback model the engine's automatic choice loads; "
                         f"write {what} elsewhere")


def _fit_inter_host(out: Optional[str]) -> int:
    """--fit --inter-host (every rank of a 2-node torchrun job runs it): the link between the
    hosts (measure.probe_inter_host), written by rank 0 as the `inter_host` of the model the
    engine would use (PYCOLLECT_MODEL's, else the built-in defaults)."""
    from ..costmodel.measure import probe_inter_host

    if not out:
        raise ValueError("--fit --inter-host needs --out FILE (the model with the links between hosts)")
    _refuse_default(out, "the links between hosts")
    fitted = probe_inter_host()
    if fitted is None:  # rank 1: rank 0 reports and writes
        return 0
    params, err, samples = fitted
    what = f"probe ({len(samples)} points at 2 ranks) of the link between two hosts"
    print(f"# fitted between hosts: {params.with_(source='').describe()}")
    print(f"#   from {what}: rms relative error {err * 100:.1f} % on those points")
    _save_inter_host(params, err, what, out)
    return 0


def _save_inter_host(params: Params, err: float, what: str, out: str) -> None:
    """The model the engine would use (PYCOLLECT_MODEL's, else the built-in defaults) with
    `params` as its links between hosts (Params.inter_host), written to `out`."""
    base = Params.load(os.environ["PYCOLLECT_MODEL"]) if os.environ.get("PYCOLLECT_MODEL") else Params()
    _save(base.with_(inter_host=params), out, f"{base.source}; between hosts: {what}", err)


def _fit_links(line_rate: str, out: Optional[str]) -> Params:
    """--validate --netns-hosts without parameters given: the parameters of the links it is
    about to measure (measure.probe_links; a failed step raises ValueError naming it),
    printed with what they were fitted from; written to `out` only where given, and never
    to the loopback model's default file."""
    from ..costmodel.measure import probe_links
    from ..netns import rate_bytes

    if out:
        _refuse_default(out, "the namespace links' fit")
    params, err, samples = probe_links(line_rate)
    what = f"probe ({len(samples)} points at 2 ranks) of 2 namespace hosts with {line_rate} cables"
    print(f"# fitted on the namespace links: {params.with_(source='').describe()}")
    print(f"#   from {what}: rms relative error {err * 100:.1f} % on those points; cable rate "
          f"{rate_bytes(line_rate) / 1e9:.3f} GB/s" + ("" if out else "; not saved (--out FILE keeps it)"))
    if out:
        _save_inter_host(params, err, what, out)
    return params


def _validate(args) -> int:
    from ..costmodel.measure import available, validate

    if args.sources:
        return _validate_saved(args.sources, params_from_args(args), args.plot)
    if args.quick:
        ops, worlds, sizes, block_s, repeats = ["all_reduce"], [2], [65536, 1 << 20], 0.002, 2
        algos = args.algos or ["ring", "direct"]
    else:
        ops, worlds, block_s, repeats = list(FORMULAS), [2, 3, 4], args.block_ms / 1e3, args.repeats
        lo, hi = (args.sizes or "64K..64M").split("..")
        sizes = size_list(parse_size(lo), parse_size(hi), 4)
        algos = args.algos
    if args.world_sizes:
        worlds = parse_world_sizes(args.world_sizes)
    # Each op's link algorithms and the shared arena's (tuning/arena.py), as the engine runs
    # them on one host.
    cases = [(op, a) for op in ops for a in [*FORMULAS[op], ARENA_ALGO] if algos is None or a in algos]
    launches = 1 if args.quick else args.launches
    if launches < 1 or repeats < 1 or block_s <= 0:
        raise ValueError("--launches and --repeats must be >= 1 and --block-ms > 0")
    line_rate = args.line_rate if args.netns_hosts else None
    if line_rate and not params_given(args):  # loopback's parameters say nothing of these links
        params = _fit_links(line_rate, args.out)  # prints them
    else:
        params = params_from_args(args)
        print(f"# model: {params.describe()}")
    refused = available(sorted({op for op, _ in cases}))
    print(f"# measured: per point the fastest of {launches} launch(es) (rounds over the grid) x {repeats} interleaved blocks of "
          f"~{block_s * 1e3:g} ms (ranks pinned to cores); load {os.getloadavg()[0]:.2f}")
    for (op, a), why in sorted(refused.items()):
        if why and (op, a) in cases:
            print(f"# skipped {op} {a}: the engine refuses it ({why})")
    cases = [c for c in cases if not refused.get(c)]
    print(_HEADER)

    if line_rate:
        print(f"# links: one rank per network-namespace host, {line_rate} cables each way")
    started = time.monotonic()

    def progress(launch, rounds, op, p):
        if rounds > 1:  # rows appear in the last round; say where the earlier ones are
            print(f"# round {launch + 1}/{rounds}: {op} at {p} ranks ({time.monotonic() - started:.0f} s)", flush=True)

    rows = validate(params, cases, worlds, sizes, block_s, repeats, on_row=_show, line_rate=line_rate,
                    launches=launches, on_launch=progress)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": {"validate": True, "load": os.getloadavg(), "cores": os.cpu_count(),
                                "line_rate": line_rate},
                       "samples": [[r.op, r.algo, r.nbytes, r.world_size, r.measured_s, DEFAULT_SEGMENT_BYTES]
                                   for r in rows],
                       "second_launch": [None if math.isnan(r.second_launch) else r.second_launch for r in rows]},
                      f, indent=1)
        print(f"# wrote {args.json}")
    _summary(rows, params, args.plot, "links: " + (f"namespace hosts, {line_rate} cables" if line_rate else "loopback"))
    return 0


_HEADER = (f"{'op':>14} {'algo':>16} {'p':>2} {'size':>6} {'measured us':>12} {'median us':>10} {'2nd best':>8} "
           f"{'predicted us':>13} {'error':>7}")


def _show(r, failure=None) -> None:
    if failure:
        print(f"{r.op:>14} {r.algo:>16} {r.world_size:>2} {format_size(r.nbytes):>6}  FAILED: {failure}", flush=True)
        return
    flag = ("  !" if abs(r.error) > LOOPBACK_TARGET else "") + ("  ~" if r.second_launch > LOOPBACK_TARGET else "")
    spread = "-" if math.isnan(r.second_launch) else f"+{r.second_launch * 100:.0f}%"
    print(f"{r.op:>14} {r.algo:>16} {r.world_size:>2} {format_size(r.nbytes):>6} {r.measured_s * 1e6:>12.1f} "
          f"{r.median_s * 1e6:>10.1f} {spread:>8} {r.predicted_s * 1e6:>13.1f} {r.error * 100:>6.1f}%{flag}", flush=True)


def _summary(rows, params, plot=None, measured="") -> None:
    sm = summarize(rows)
    print(f"# {sm.within}/{sm.total} rows within {LOOPBACK_TARGET * 100:.0f} %"
          + (f"; beyond: {len(sm.beyond)} (marked !)" if sm.beyond else ""))
    if sm.launches_known:
        print(f"# launches: at {len(sm.noisy)} of {sm.total} rows (marked ~) no other launch came within "
              f"{LOOPBACK_TARGET * 100:.0f} % of the fastest (column '2nd best'): one launch's figure, as uncertain as "
              f"the target; {sm.noisy_beyond} of them are beyond it")
    check = choice_check(rows, params)
    if check is not None:
        w = check.worst
        print(f"# automatic choice vs fastest measured: within {CHOICE_TARGET * 100:.0f} % at {check.ok} of "
              f"{len(check.points)} points; worst {w.slower * 100:.1f} % slower ({w.op}, {w.world_size} ranks, "
              f"{format_size(w.nbytes)}: picks {w.pick}, fastest {w.fastest})")
    versus = arena_check(rows, params)
    if versus is not None:
        model, rule = versus
        print(f"# the shared arena or the links, within {CHOICE_TARGET * 100:.0f} % of the fastest measured at "
              f"{len(model.points)} points: the model's pick at {model.ok}, the engine's rule at {rule.ok}; worst "
              + "; ".join(f"{who} {w.slower * 100:.1f} % slower ({w.op}, {w.world_size} ranks, "
                          f"{format_size(w.nbytes)}: picks {w.pick}, fastest {w.fastest})"
                          for who, w in (("model", model.worst), ("rule", rule.worst))))
    if plot and rows:
        validate_plot(plot, rows, f"model vs measured ({measured}): {sm.within} of {sm.total} within "
                                  f"{LOOPBACK_TARGET * 100:.0f} %; {params.describe()}")
        print(f"# wrote {plot}")


def _validate_saved(paths, params, plot=None) -> int:
    """--validate --from: the table and checks for samples measured before (no ranks start)."""
    rows = saved_rows(paths, params)
    print(f"# model: {params.describe()}")
    print(f"# measured: {len(rows)} samples from {', '.join(paths)} (not measured again)")
    print(_HEADER)
    for r in rows:
        _show(r)
    _summary(rows, params, plot, "samples of " + ", ".join(os.path.basename(p) for p in paths))
    return 0


def _compare(paths, plot=None) -> int:
    """--compare A.json B.json: two measurements of the same engine, point by point, the
    first read as if it were a prediction of the second (costmodel.check.compare)."""
    c = compare(paths)
    a, b = c.names
    print(f"# {b} against {a}: {len(c.rows)} points in both" + (f"; {c.only_one} in one only, left out" if c.only_one else ""))
    print(f"{'op':>14} {'algo':>16} {'p':>2} {'size':>6} {a[:12]:>12} {b[:12]:>12} {'gap':>7}")
    for r in c.rows:
        flag = "  !" if abs(r.error) > LOOPBACK_TARGET else ""
        print(f"{r.op:>14} {r.algo:>16} {r.world_size:>2} {format_size(r.nbytes):>6} {r.predicted_s * 1e6:>12.1f} "
              f"{r.measured_s * 1e6:>12.1f} {r.error * 100:>6.1f}%{flag}")
    print(f"# the two agree within {LOOPBACK_TARGET * 100:.0f} % at {len(c.rows) - len(c.beyond)} of {len(c.rows)} "
          f"points (marked ! beyond); at {len(c.apart)} they are more than {c.widest:.3f}x apart, where no "
          f"prediction can be within {LOOPBACK_TARGET * 100:.0f} % of both")
    if plot:
        validate_plot(plot, c.rows, f"{a} as a prediction of {b}: two measurements of one engine, the floor under "
                                    f"the model's error", ylabel=f"{a} / {b} - 1 (%)")
        print(f"# wrote {plot}")
    return 0


def _predict(args) -> int:
    params = params_from_args(args)
    nbytes = parse_size(args.size)
    worlds = parse_world_sizes(args.world_sizes or "8..4096")
    algos = args.algos or list(FORMULAS[args.op])
    table = prediction_table(args.op, nbytes, worlds, algos, params)
    print(f"# {args.op}, {format_size(nbytes)} ({'per rank' if args.op in ('all_reduce', 'broadcast') else 'total'}); "
          f"{params.describe()}")
    print(f"{'ranks':>6} " + " ".join(f"{a + ' ms':>18} {'busbw GB/s':>10}" for a in algos) + f" {'best':>16}")
    for row in table:
        cells = " ".join(f"{t * 1e3:>18.3f} {bus_bandwidth(args.op, nbytes, row.world_size, t) / 1e9:>10.2f}"
                         for t in row.times)
        mark = f"  <- crossover: {row.crossover[0]} -> {row.crossover[1]}" if row.crossover else ""
        print(f"{row.world_size:>6} {cells} {row.best:>16}{mark}")
    if not any(row.crossover for row in table):
        print(f"# no crossover: {table[0].best if table else '-'} is best at every world size")
    if args.plot:
        cross = {row.world_size: row.crossover for row in table if row.crossover}
        predict_plot(args.plot, args.op, nbytes, algos, [(row.world_size, row.times) for row in table], cross, params)
        print(f"# wrote {args.plot}")
    return 0
