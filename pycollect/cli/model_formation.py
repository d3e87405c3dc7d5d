"""`pycollect model --formation`: forming a group of 256 to 16 384 ranks, on paper
(pycollect.costmodel.formation): store requests, bytes and server time, round trips,
connections per rank and the time until a first ring collective can run, for pycollect's
formation (eager full mesh or links on first use, with and without multi_get batching)
beside Gloo's and NCCL's."""
from __future__ import annotations

from ..costmodel import parse_rate, parse_time
from ..costmodel.check import parse_world_sizes
from ..costmodel.formation import SCHEMES, StoreParams, formation_table, growth
from .model_plot import formation_plot

DEFAULT_WORLDS = "256..16384"


def add_formation_arguments(p) -> None:
    g = p.add_argument_group("--formation (defaults: StoreParams in pycollect/costmodel/formation.py)")
    g.add_argument("--store-rtt", default=None, help="a round trip between two hosts, e.g. 100us")
    g.add_argument("--local-rtt", default=None, help="a round trip between two ranks of one host, e.g. 20us")
    g.add_argument("--store-bandwidth", default=None, help="bytes through the store server, e.g. 10gbit or 1GB/s")
    g.add_argument("--store-service", default=None, help="the store server thread's time per request, e.g. 10us")
    g.add_argument("--ranks-per-host", type=int, default=None, help="ranks on each host (default 8)")
    g.add_argument("--batch", type=int, default=None, help="keys per multi_get / multi_set (default 0: all at once)")
    g.add_argument("--schemes", nargs="+", default=None, choices=sorted(SCHEMES), metavar="SCHEME",
                   help=f"which formations (default all: {', '.join(SCHEMES)})")


def store_params_from_args(args) -> StoreParams:
    changes = {}
    for flag, field, parse in (("store_rtt", "rtt", parse_time), ("local_rtt", "local_rtt", parse_time),
                               ("store_service", "service", parse_time),
                               ("store_bandwidth", "bandwidth", lambda t: 1.0 / parse_rate(t))):
        if getattr(args, flag) is not None:
            changes[field] = parse(getattr(args, flag))
    if args.ranks_per_host is not None:
        if args.ranks_per_host < 1:
            raise ValueError("--ranks-per-host must be >= 1")
        changes["per_host"] = args.ranks_per_host
    if args.batch is not None:
        if args.batch < 0:
            raise ValueError("--batch must be >= 0")
        changes["batch"] = args.batch
    return StoreParams().with_(**changes)


def run_formation(args) -> int:
    params = store_params_from_args(args)
    schemes = args.schemes or list(SCHEMES)
    worlds = parse_world_sizes(args.world_sizes or DEFAULT_WORLDS)
    rows = formation_table(worlds, params, schemes)
    print(f"# formation on paper: {params.describe()}")
    print("# time: until a first ring collective can run (links on first use: the ring's 2 a rank; an all-to-all "
          "would make n-1); store phases last the longer of the slowest rank's round trips and the server's "
          "serialized work")
    print(f"{'ranks':>6} {'scheme':>24} {'store reqs':>11} {'store MB':>10} {'server s':>9} {'rank-0 RTs':>10} "
          f"{'conns/rank':>10} {'conns max':>9} {'store s':>9} {'connect s':>9} {'formed s':>9}")
    for t in rows:
        print(f"{t.ranks:>6} {t.scheme:>24} {t.requests:>11} {t.store_bytes / 1e6:>10.2f} {t.server_s:>9.3f} "
              f"{t.round_trips:>10} {t.conns:>10} {t.conns_max:>9} {t.store_s:>9.3f} {t.connect_s:>9.4f} "
              f"{t.time_s:>9.3f}")
    if len(worlds) > 1:
        print("# growth with ranks (log-log slope, first to last size): "
              + "; ".join(f"{s}: requests {growth(by, 'requests'):.2f}, bytes {growth(by, 'store_bytes'):.2f}, "
                          f"time {growth(by, 'time_s'):.2f}"
                          for s in schemes for by in [[t for t in rows if t.scheme == s]]))
    if args.plot:
        formation_plot(args.plot, schemes, rows, params)
        print(f"# wrote {args.plot}")
    return 0
