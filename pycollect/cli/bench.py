"""`pycollect bench`: nccl-tests-style flags over pycollect.benchmark."""
from __future__ import annotations

import os
import sys

from ..benchmark.sizes import OPS, DTYPE_BYTES, parse_size, size_list


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="benchmark collectives against Gloo (nccl-tests style)",
                              description="Times pycollect and the peer in the same processes, interleaved; "
                                          "prints size, count, type, redop, time, algbw, busbw, #wrong and the "
                                          "ratio, memcpy and link-limit lines, and writes JSON and a PNG plot.")
    p.add_argument("-b", "--minbytes", default="8", help="smallest size (e.g. 8, 1K, 1M)")
    p.add_argument("-e", "--maxbytes", default="64M", help="largest size")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0, help="multiply the size by this each row")
    p.add_argument("-n", "--iters", type=int, default=20, help="calls per timed block")
    p.add_argument("-w", "--warmup_iters", type=int, default=5, help="untimed calls per size")
    p.add_argument("-r", "--repeats", type=int, default=5, help="timed blocks per engine (median reported)")
    p.add_argument("-o", "--op", default="all_reduce", choices=OPS)
    p.add_argument("-g", "--world-size", type=int, default=2, help="ranks on this machine")
    p.add_argument("-d", "--dtype", default="float32", choices=sorted(DTYPE_BYTES))
    p.add_argument("--peer", default="gloo", choices=["gloo", "nccl", "none"])
    p.add_argument("--algo", default=None, choices=["auto", "ring", "direct"],
                   help="force pycollect's all-reduce algorithm (PYCOLLECT_ALGO)")
    p.add_argument("--transport", default=None, choices=["auto", "tcp", "shm"],
                   help="what carries pycollect's links (PYCOLLECT_TRANSPORT; default auto: shared memory here)")
    p.add_argument("--no-link-limit", action="store_true", help="skip the TCP link-limit measurement")
    p.add_argument("--json", default=None, help="write the results here (default bench/results/OP_gN.json)")
    p.add_argument("--plot", default=None, help="write the PNG plot here (default next to the JSON)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..benchmark.launch import Config, run as launch

    try:
        sizes = size_list(parse_size(args.minbytes), parse_size(args.maxbytes), args.stepfactor)
        if args.world_size < 1:
            raise ValueError(f"world size must be >= 1, got {args.world_size}")
        if args.iters < 1 or args.repeats < 1 or args.warmup_iters < 0:
            raise ValueError("iters and repeats must be >= 1 and warm-up >= 0")
        if args.peer == "nccl":
            raise NotImplementedError("--peer nccl needs CUDA GPUs and pycollect's CUDA staging, which is not "
                                      "implemented yet; use --peer gloo")
    except (ValueError, NotImplementedError) as e:
        print(f"pycollect bench: {e}", file=sys.stderr)
        return 2
    env = {k: v for k, v in os.environ.items() if k.startswith("PYCOLLECT_")}
    if args.algo:
        env["PYCOLLECT_ALGO"] = args.algo
    if args.transport:
        env["PYCOLLECT_TRANSPORT"] = args.transport
    cfg = Config(op=args.op, world_size=args.world_size, sizes=sizes, dtype=args.dtype, iters=args.iters,
                 warmup=args.warmup_iters, repeats=args.repeats, peer=None if args.peer == "none" else args.peer,
                 link_limit=not args.no_link_limit, env=env)
    json_path = args.json or os.path.join("bench", "results", f"{args.op}_g{args.world_size}.json")
    plot_path = args.plot or os.path.splitext(json_path)[0] + ".png"
    os.makedirs(os.path.dirname(json_path) or ".", exist_ok=True)
    os.makedirs(os.path.dirname(plot_path) or ".", exist_ok=True)
    result = launch(cfg, json_path, plot_path)
    wrong = sum(r["pycollect"]["wrong"] for r in result["rows"])
    return 1 if wrong else 0
