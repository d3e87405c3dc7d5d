"""``pycollect memory``: the memory and communication planner on the command line.

    pycollect memory --params 70B --gpus 8 --sharding fsdp      breakdown table
    pycollect memory --params 70B --gpus 64 --compare           every stage side by side
    pycollect memory --params 70B --plan --gpu-memory 80        fewest GPUs per stage
    pycollect memory --params 7.5B --gpus 64 --deepspeed        DeepSpeed's estimators

The main ``pycollect`` command calls :func:`register`; ``python -m pycollect.cli.memory``
runs the same command on its own.  Errors print one line to stderr and exit with 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Optional, Sequence

from .. import memory as mem

_GPUS_DEFAULT = 8
_HELP = "per-GPU memory and communication of DDP / ZeRO / FSDP training"
_DESCRIPTION = ("Per-GPU memory (decimal GB) and per-step communication of data-parallel training under DDP, "
                "ZeRO-1/2/3, FSDP and hybrid sharding.")


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``memory`` subcommand to an ``argparse`` subparsers object."""
    parser = subparsers.add_parser("memory", help=_HELP, description=_DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("model and job")
    g.add_argument("--params", required=True, type=str,
                   help="model size: 70B, 7.5B, 350M, 1.2T (a bare number is billions)")
    g.add_argument("--gpus", type=int, help="GPUs in the job (not needed with --plan)")
    g.add_argument("--sharding", default="fsdp",
                   help="none/ddp, zero1, zero2, zero3/fsdp, hybrid/hsdp (default: fsdp)")
    g.add_argument("--precision", default="mixed", help="mixed (default) or fp32")
    g.add_argument("--optimizer", default="adam", help="adam (default), adamw, sgd_momentum, sgd")
    g.add_argument("--no-master-weights", dest="master_weights", action="store_false",
                   help="no fp32 master copy: 12 bytes/param with Adam instead of 16")
    g.add_argument("--gpus-per-node", type=int, default=8, help="node size (default: 8)")
    g.add_argument("--gpu-memory", type=float, default=80.0, help="GB per GPU (default: 80)")

    g = parser.add_argument_group("activations (all of --layers/--hidden/--heads/--seq-len)")
    g.add_argument("--layers", type=int)
    g.add_argument("--hidden", type=int)
    g.add_argument("--heads", type=int)
    g.add_argument("--seq-len", type=int)
    g.add_argument("--micro-batch", type=int, default=1, help="sequences per GPU (default: 1)")
    g.add_argument("--recompute", default="none", choices=mem.RECOMPUTE_MODES)
    g.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default: 1)")
    g.add_argument("--pp", type=int, default=1, help="pipeline stages (default: 1)")
    g.add_argument("--sp", action="store_true", help="sequence parallelism (with --tp)")

    g = parser.add_argument_group("offload, buffers, bandwidth")
    g.add_argument("--offload-optimizer", action="store_true")
    g.add_argument("--offload-params", action="store_true", help="zero3/hybrid only")
    g.add_argument("--largest-unit", "--largest-layer", dest="largest_unit",
                   help="params of the largest FSDP unit / layer, e.g. 0.9B")
    g.add_argument("--no-prefetch", dest="prefetch", action="store_false")
    g.add_argument("--bus-bandwidth", type=float, help="bus bandwidth in GB/s (nccl-tests busbw)")
    g.add_argument("--inter-node-bandwidth", type=float, help="GB/s across nodes (hybrid)")
    from ._params import add_param_arguments  # without a typed bandwidth, the cost model gives the time

    add_param_arguments(parser, file_flags=("--model-params",))

    g = parser.add_argument_group("reports (default: one breakdown)").add_mutually_exclusive_group()
    g.add_argument("--compare", action="store_true", help="every stage side by side")
    g.add_argument("--plan", action="store_true", help="fewest GPUs per stage for --gpu-memory")
    g.add_argument("--deepspeed", action="store_true", help="DeepSpeed's own estimators")


def run(args: argparse.Namespace) -> int:
    """Print the report ``args`` ask for; return the exit code (2 on bad input)."""
    try:
        report: Callable[[argparse.Namespace], str]
        if args.plan:
            report = _plan
        elif args.compare:
            report = _compare
        elif args.deepspeed:
            report = _deepspeed
        else:
            report = _breakdown
        text = report(args)
    except ValueError as exc:
        print(f"pycollect memory: error: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0


# -- options -------------------------------------------------------------------------

def _options(args: argparse.Namespace) -> dict[str, Any]:
    """estimate_memory keyword options from the command line (all but size, GPUs, stage)."""
    shape = (args.layers, args.hidden, args.heads, args.seq_len)
    model = None
    if any(v is not None for v in shape):
        if any(v is None for v in shape):
            raise ValueError("give --layers, --hidden, --heads and --seq-len together")
        model = mem.ModelShape(args.layers, args.hidden, args.heads, args.seq_len,
                               args.micro_batch)
    unit = mem.parse_params(args.largest_unit) if args.largest_unit is not None else None
    return dict(precision=args.precision, optimizer=args.optimizer,
                master_weights=args.master_weights, model=model, recompute=args.recompute,
                tensor_parallel=args.tp, pipeline_parallel=args.pp, sequence_parallel=args.sp,
                offload_optimizer=args.offload_optimizer, offload_params=args.offload_params,
                largest_unit_billions=unit, prefetch=args.prefetch,
                gpus_per_node=args.gpus_per_node, gpu_memory_gb=args.gpu_memory,
                bus_bandwidth_gbs=args.bus_bandwidth,
                inter_node_bandwidth_gbs=args.inter_node_bandwidth, comm_model=_comm_model(args))


def _comm_model(args: argparse.Namespace):
    from ._params import params_from_args

    return params_from_args(args)


def _time_source(args: argparse.Namespace) -> str:
    if args.bus_bandwidth is not None:
        return f"communication time: bus bandwidth {args.bus_bandwidth:g} GB/s (nccl-tests busbw)"
    return (f"communication time: cost model, each collective's fastest algorithm "
            f"({_comm_model(args).describe()})")


def _gpus(args: argparse.Namespace) -> int:
    if args.gpus is None:
        raise ValueError("--gpus is required (except with --plan)")
    if args.gpus < 1:
        raise ValueError(f"--gpus must be at least 1, got {args.gpus}")
    return args.gpus


def _size(billions: float) -> str:
    if billions >= 1000:
        return f"{billions / 1000:g}T"
    if billions >= 1:
        return f"{billions:g}B"
    return f"{billions * 1000:g}M"


def _gb(value: float) -> str:
    return f"{value:.2f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Plain aligned columns: the first left-aligned, the others right-aligned."""
    cells = [list(header)] + [list(r) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = []
    for n, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _accounting(est: mem.MemoryEstimate) -> str:
    per = est.as_dict()["bytes_per_param"]
    master = ""
    if est.precision == "mixed":
        master = ", fp32 master copy" if est.master_weights else ", no fp32 master copy"
    return f"{est.precision} precision, {est.optimizer}{master}: {per} bytes/param of model states"


# -- reports -------------------------------------------------------------------------

def _breakdown(args: argparse.Namespace) -> str:
    params = mem.parse_params(args.params)
    est = mem.estimate_memory(params, _gpus(args), args.sharding, **_options(args))
    bits = "fp32" if est.precision == "fp32" else "16-bit"
    comm = est.comm
    rows = [
        [f"weights ({bits})", _gb(est.weights_bytes / mem.GB)],
        ["gradients", _gb(est.gradients_bytes / mem.GB)],
        ["optimizer state", _gb(est.optimizer_bytes / mem.GB)],
        ["activations", _gb(est.activations_bytes / mem.GB)],
    ]
    if est.stage in ("zero3", "hybrid"):
        rows.append(["FSDP unit buffers", _gb(est.buffers_bytes / mem.GB)])
    rows += [
        ["total per GPU", _gb(est.per_gpu_gb)],
        ["total across GPUs", _gb(est.per_gpu_gb * est.num_gpus)],
    ]
    if est.cpu_bytes:
        rows.append(["offloaded to CPU, per GPU", _gb(est.cpu_bytes / mem.GB)])
    rows.append(["communication per step, per rank", _gb(comm.gb_per_rank)])
    if comm.time_s is not None:
        rows.append(["communication time per step (s)", f"{comm.time_s:.3f}"])
    shard = f"sharded over {est.shard_degree}" if est.shard_degree > 1 else "replicated"
    fits = "yes" if est.fits else "no"
    lines = [
        f"{_size(params)} parameters on {est.num_gpus} GPUs, {est.sharding} "
        f"({est.stage}, {shard}, tensor parallel {est.tensor_parallel}, pipeline stages {est.pipeline_parallel})",
        _accounting(est),
        "",
        _table(["component", "GB"], rows),
        "",
        f"fits in {args.gpu_memory:g} GB per GPU: {fits}",
    ]
    lines += [f"note: {n}" for n in est.notes] + [f"note: {_time_source(args)}"]
    return "\n".join(lines)


def _compare(args: argparse.Namespace) -> str:
    params = mem.parse_params(args.params)
    gpus = _gpus(args)
    options = _options(args)
    columns: list[Optional[mem.MemoryEstimate]] = []
    skipped = []
    for stage in mem.STAGES:
        try:
            columns.append(mem.estimate_memory(params, gpus, stage, **options))
        except ValueError as exc:
            columns.append(None)
            skipped.append(f"{stage}: {exc}")
    if all(c is None for c in columns):
        raise ValueError("; ".join(skipped))

    def row(label: str, value: Callable[[mem.MemoryEstimate], str]) -> list[str]:
        return [label] + ["n/a" if c is None else value(c) for c in columns]

    rows = [
        row("weights", lambda e: _gb(e.weights_bytes / mem.GB)),
        row("gradients", lambda e: _gb(e.gradients_bytes / mem.GB)),
        row("optimizer state", lambda e: _gb(e.optimizer_bytes / mem.GB)),
        row("activations", lambda e: _gb(e.activations_bytes / mem.GB)),
        row("FSDP unit buffers", lambda e: _gb(e.buffers_bytes / mem.GB)),
        row("total per GPU", lambda e: _gb(e.per_gpu_gb)),
        row(f"fits in {args.gpu_memory:g} GB", lambda e: "yes" if e.fits else "no"),
        row("comm GB/step/rank", lambda e: _gb(e.comm.gb_per_rank)),
    ]
    if any(c is not None and c.cpu_bytes for c in columns):
        rows.insert(6, row("offloaded to CPU", lambda e: _gb(e.cpu_bytes / mem.GB)))
    rows.append(row("comm s/step", lambda e: f"{e.comm.time_s:.3f}"))
    first = next(c for c in columns if c is not None)
    lines = [f"{_size(params)} parameters on {gpus} GPUs, GB per GPU by stage",
             _accounting(first), "", _table(["", *mem.STAGES], rows)]
    lines += [f"n/a {s}" for s in skipped]
    notes = dict.fromkeys(n for c in columns if c is not None for n in c.notes)
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def _plan(args: argparse.Namespace) -> str:
    params = mem.parse_params(args.params)
    options = _options(args)
    gpu_memory = options.pop("gpu_memory_gb")
    if args.offload_params:
        raise ValueError("--plan compares every stage; --offload-params applies to zero3 only")
    rows = []
    notes: dict[str, None] = {}
    for stage in mem.STAGES:
        n = mem.gpus_needed(params, gpu_memory, stage, **options)
        if n is None:
            rows.append([stage, "none fits", "", "", ""])
            continue
        est = mem.estimate_memory(params, n, stage, gpu_memory_gb=gpu_memory, **options)
        notes.update(dict.fromkeys(est.notes))
        rows.append([stage, str(n), _gb(est.per_gpu_gb), _gb(est.comm.gb_per_rank), f"{est.comm.time_s:.3f}"])
    lines = [f"{_size(params)} parameters: fewest {gpu_memory:g} GB GPUs per stage",
             _accounting(mem.estimate_memory(params, args.tp * args.pp, "ddp", **options)), "",
             _table(["stage", "GPUs", "GB per GPU", "comm GB/step/rank", "comm s/step"], rows)]
    lines += [f"note: {n}" for n in notes] + [f"note: {_time_source(args)}"]
    return "\n".join(lines)


def _deepspeed(args: argparse.Namespace) -> str:
    params = mem.parse_params(args.params)
    gpus = _gpus(args)
    per_node = min(args.gpus_per_node, gpus)
    if per_node < 1 or gpus % per_node:
        raise ValueError(
            f"--gpus {gpus} is not a whole number of {args.gpus_per_node}-GPU nodes")
    nodes = gpus // per_node
    total = round(params * 1e9)
    if args.largest_unit is not None:
        largest = round(mem.parse_params(args.largest_unit) * 1e9)
    else:
        model = _options(args)["model"]
        largest = model.layer_params if model is not None else 0
    z2, z3 = mem.deepspeed_zero2_estimate, mem.deepspeed_zero3_estimate
    cases = [
        ("zero2", "none", z2(total, per_node, nodes)),
        ("zero2", "optimizer", z2(total, per_node, nodes, cpu_offload=True)),
        ("zero3", "none", z3(total, largest, per_node, nodes)),
        ("zero3", "optimizer", z3(total, largest, per_node, nodes, cpu_offload=True)),
        ("zero3", "optimizer+params",
         z3(total, largest, per_node, nodes, cpu_offload=True, cpu_offload_params=True)),
    ]
    rows = [[stage, off, _gb(e.gpu_gb), _gb(e.cpu_gb)] for stage, off, e in cases]
    lines = [f"DeepSpeed estimators: {_size(params)} parameters, largest layer {largest:,} "
             f"params, {nodes} node(s) x {per_node} GPUs (zero_init, CPU buffer factor 1.5)",
             "", _table(["stage", "offload", "GPU GB per GPU", "CPU GB per node"], rows)]
    if largest == 0:
        lines.append("note: largest layer taken as 0; give --largest-layer or the model shape")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pycollect.cli.memory",
                                     description=(__doc__ or "").splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
