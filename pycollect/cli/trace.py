"""`pycollect trace`: run one collective on local ranks with the engine's tracing on and
write a Chrome/Perfetto trace JSON and a PNG timeline (pycollect.trace)."""
from __future__ import annotations

import os
import sys

from ..measuring import DTYPE_BYTES, OPS, format_size, parse_size
from ..types import Algo


def register(subparsers) -> None:
    p = subparsers.add_parser("trace", help="trace one collective step by step (Perfetto JSON + PNG timeline)",
                              description="Runs the op on local ranks (a few untraced warm-up calls, then one "
                                          "traced), and writes a Chrome/Perfetto trace JSON (one process per rank, "
                                          "one track per link direction and one for reductions) and a PNG "
                                          "timeline. Open the JSON in ui.perfetto.dev or chrome://tracing.")
    p.add_argument("-o", "--op", default="all_reduce", choices=OPS)
    p.add_argument("-s", "--size", default="4M", help="bytes (e.g. 64K, 4M): the all-reduce's buffer, the "
                                                       "all-gather's output, the reduce-scatter's input")
    p.add_argument("-g", "--world-size", type=int, default=4, help="ranks on this machine")
    p.add_argument("--ranks-per-host", type=int, default=0, metavar="G",
                   help="play hosts of G consecutive ranks (PYCOLLECT_HOST_TAG: shared memory within, TCP "
                        "between); with --algo hierarchical the intra- and inter-host phases get tracks of their own")
    p.add_argument("-d", "--dtype", default="float32", choices=sorted(DTYPE_BYTES))
    p.add_argument("--algo", default="auto", choices=[a.name.lower() for a in Algo],
                   help="algorithm, passed to the op (algo=); ops without a choice accept only auto")
    p.add_argument("--segment-bytes", default=None, help="pipelining unit (PYCOLLECT_SEGMENT_BYTES), e.g. 256K")
    p.add_argument("--transport", default=None, choices=["auto", "tcp", "shm"],
                   help="what carries the links (PYCOLLECT_TRANSPORT; default auto: shared memory here)")
    p.add_argument("--warmup", type=int, default=2, help="untraced calls before the traced one")
    p.add_argument("--out", default="traces", help="directory for the files (created)")
    p.add_argument("--name", default=None, help="file name stem (default OP_ALGO_gN_SIZE)")
    p.add_argument("--dpi", type=int, default=110, help="resolution of the PNG (70 makes a small one for docs)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..trace import run_trace, to_spans, write_chrome, write_timeline
    from ..trace.job import check_request

    try:
        nbytes = parse_size(args.size)
        algo = check_request(args.op, args.algo, args.world_size, nbytes, args.dtype)
        if args.warmup < 0:
            raise ValueError(f"--warmup must be >= 0, got {args.warmup}")
        if not 20 <= args.dpi <= 600:
            raise ValueError(f"--dpi must be in [20, 600], got {args.dpi}")
        env = {k: v for k, v in os.environ.items() if k.startswith("PYCOLLECT_")}
        if args.segment_bytes is not None:
            env["PYCOLLECT_SEGMENT_BYTES"] = str(parse_size(args.segment_bytes))
        if args.transport:
            env["PYCOLLECT_TRANSPORT"] = args.transport
    except ValueError as e:
        print(f"pycollect trace: {e}", file=sys.stderr)
        return 2
    try:
        result = run_trace(args.op, nbytes, args.world_size, algo=algo, dtype=args.dtype, warmup=args.warmup,
                           env=env, ranks_per_host=args.ranks_per_host)
    except ValueError as e:
        print(f"pycollect trace: {e}", file=sys.stderr)
        return 2
    spans = to_spans(result.events)
    os.makedirs(args.out, exist_ok=True)
    stem = args.name or f"{args.op}_{algo}_g{args.world_size}_{format_size(nbytes)}"
    kinds = sorted({k for links in result.links.values() for k in links.values()})
    hosts = f" on {args.world_size // args.ranks_per_host} hosts" if args.ranks_per_host else ""
    title = (f"{args.op} {format_size(nbytes)}B {args.dtype}, algo={algo}, {args.world_size} ranks{hosts}, "
             f"links: {'+'.join(kinds) or 'none'}")
    meta = {"op": args.op, "bytes": nbytes, "world_size": args.world_size, "algo": algo, "dtype": args.dtype,
            "links": kinds}
    json_path = write_chrome(spans, os.path.join(args.out, stem + ".json"), meta)
    png_path = write_timeline(spans, os.path.join(args.out, stem + ".png"), title, args.dpi)
    print(f"{title}: {len(result.events)} events, {len(spans)} spans")
    print(f"trace JSON: {json_path}   (open in https://ui.perfetto.dev or chrome://tracing)")
    print(f"timeline:   {png_path}")
    return 0
