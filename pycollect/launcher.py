"""Read the launcher's environment: who started this process, as which rank, where rank 0 is.

    env = detect()            # LaunchEnv(launcher="openmpi", rank=1, world_size=2, ...)
    export_torch_env()        # fill RANK, WORLD_SIZE, ... MASTER_PORT for torch.distributed

Each launcher announces the rank in its own variables. In order of precedence:

  torchrun (or set by hand, or a Kubernetes PyTorchJob):
                 RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
  Open MPI:      OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
  MPICH, Intel MPI (Hydra):  PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
  PMIx:          PMIX_RANK (the size from another launcher's variables)
  Slurm (srun):  SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE

Each field comes from the first of these that sets it; where a later one disagrees
(`srun torchrun ...` sets SLURM_PROCID to the node's task, RANK to the process's),
a note says which variable was used and which ignored. MASTER_ADDR and MASTER_PORT
always win; without them the launcher that gave the rank says where rank 0 is:
MPI with every rank on one host: 127.0.0.1; Slurm: the first host of the step's (or
the job's) node list, and port 10000 + SLURM_JOB_ID % 50000. MPI's port defaults to
29500 (torchrun's). An MPI job on several hosts without MASTER_ADDR is an error that
says what to pass (`mpirun -x MASTER_ADDR=...`).

This module imports nothing of pycollect, torch or the engine: `python -m
pycollect.launcher` prints what it finds, under any launcher.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple

DEFAULT_PORT = 29500  # torchrun's --master-port default
SLURM_PORT_BASE, SLURM_PORT_SPAN = 10000, 50000

FIELDS = ("rank", "world_size", "local_rank", "local_world_size")


@dataclass(frozen=True)
class LaunchEnv:
    """What the launcher said. `launcher` names the one that gave the rank ("torchrun",
    "openmpi", "mpich", "pmix", "slurm"; "none" when no variable names a rank). A field
    nobody set is None. `notes`: which variables were used, defaults taken, and where two
    launchers disagreed; `conflicts`: those disagreements alone (init_process_group warns
    of them)."""
    launcher: str
    rank: Optional[int]
    world_size: Optional[int]
    local_rank: Optional[int]
    local_world_size: Optional[int]
    master_addr: Optional[str]
    master_port: Optional[int]
    notes: Tuple[str, ...] = field(default=())
    conflicts: Tuple[str, ...] = field(default=())


# (launcher, its name in notes, {field: variable})
_SOURCES: List[Tuple[str, str, Dict[str, str]]] = [
    ("torchrun", "torchrun", {"rank": "RANK", "world_size": "WORLD_SIZE", "local_rank": "LOCAL_RANK",
                              "local_world_size": "LOCAL_WORLD_SIZE"}),
    ("openmpi", "Open MPI", {"rank": "OMPI_COMM_WORLD_RANK", "world_size": "OMPI_COMM_WORLD_SIZE",
                             "local_rank": "OMPI_COMM_WORLD_LOCAL_RANK",
                             "local_world_size": "OMPI_COMM_WORLD_LOCAL_SIZE"}),
    ("mpich", "MPICH/Hydra", {"rank": "PMI_RANK", "world_size": "PMI_SIZE", "local_rank": "MPI_LOCALRANKID",
                              "local_world_size": "MPI_LOCALNRANKS"}),
    ("pmix", "PMIx", {"rank": "PMIX_RANK"}),
    ("slurm", "Slurm", {"rank": "SLURM_PROCID", "world_size": "SLURM_NTASKS", "local_rank": "SLURM_LOCALID"}),
]
_TITLE = {key: title for key, title, _ in _SOURCES}
_MPI = ("openmpi", "mpich", "pmix")


def _int(environ: Mapping[str, str], name: str) -> Optional[int]:
    value = environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def _slurm_step(environ: Mapping[str, str]) -> bool:
    """Whether this process is an srun task: an sbatch script also has SLURM_PROCID=0 and
    SLURM_NTASKS=N, but no step id, and must not take itself for rank 0 of N."""
    return bool(environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID"))


def _read(environ: Mapping[str, str]) -> Dict[str, List[Tuple[str, str, int]]]:
    """field -> [(launcher, variable, value)] in order of precedence, for every variable set."""
    found: Dict[str, List[Tuple[str, str, int]]] = {f: [] for f in FIELDS}
    for key, _, names in _SOURCES:
        if key == "slurm" and not _slurm_step(environ):
            continue
        for f, name in names.items():
            value = _int(environ, name)
            if value is not None:
                found[f].append((key, name, value))
    if _slurm_step(environ):
        if not any(k == "slurm" for k, _, _ in found["world_size"]):
            n = _int(environ, "SLURM_NPROCS")  # older Slurm's name for SLURM_NTASKS
            if n is not None:
                found["world_size"].append(("slurm", "SLURM_NPROCS", n))
        local = _slurm_local_size(environ)
        if local is not None:
            found["local_world_size"].append(("slurm",) + local)
    return found


def _slurm_local_size(environ: Mapping[str, str]) -> Optional[Tuple[str, int]]:
    """(variable, tasks on this node) from SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE
    ("2(x3),1": two tasks on each of three nodes, then one) at SLURM_NODEID, or
    SLURM_NTASKS_PER_NODE."""
    node = _int(environ, "SLURM_NODEID")
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        text = environ.get(name)
        if not text or node is None:
            continue
        counts: List[int] = []
        for part in text.split(","):
            m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
            if m is None:
                raise ValueError(f"{name}={text!r} is not Slurm's tasks-per-node list (like 2(x3),1)")
            counts += [int(m.group(1))] * int(m.group(2) or 1)
        if 0 <= node < len(counts):
            return name, counts[node]
    n = _int(environ, "SLURM_NTASKS_PER_NODE")
    return None if n is None else ("SLURM_NTASKS_PER_NODE", n)


def detect(environ: Optional[Mapping[str, str]] = None, *, need_master: bool = False) -> LaunchEnv:
    """The launcher's view of this process, from `environ` (default os.environ).

    need_master=True: the caller will meet at MASTER_ADDR:MASTER_PORT, so an MPI or Slurm
    job whose rank 0 cannot be found raises ValueError naming the variable to set. (A job
    with no launcher, or torchrun's variables without MASTER_ADDR, leaves them None: the
    caller's own error says what else it accepts.) A variable that is not an integer, or a
    malformed node list, raises ValueError naming it either way."""
    environ = os.environ if environ is None else environ
    found = _read(environ)
    notes: List[str] = []
    conflicts: List[str] = []
    chosen: Dict[str, Optional[int]] = {}
    for f in FIELDS:
        got = found[f]
        chosen[f] = got[0][2] if got else None
        if not got:
            continue
        key, name, value = got[0]
        ignored = [f"{n}={v} ({_TITLE[k]})" for k, n, v in got[1:] if v != value]
        if ignored:
            conflicts.append(f"{f}: used {name}={value} ({_TITLE[key]}), ignored " + ", ".join(ignored)
                             + " (the launchers disagree; the first in precedence wins)")
    notes.extend(conflicts)
    launcher = found["rank"][0][0] if found["rank"] else "none"
    if launcher != "none":
        used = [n for f in FIELDS for k, n, _ in found[f][:1] if k == launcher]
        notes.insert(0, f"rank from {_TITLE[launcher]}'s variables ({', '.join(used)})")
    if not _slurm_step(environ) and environ.get("SLURM_PROCID") and launcher == "none":
        notes.append("SLURM_PROCID is set but SLURM_STEP_ID is not: an sbatch script, not an srun task; "
                     "Slurm's variables were ignored (start the ranks with srun)")
    addr, port = _master(environ, launcher, chosen, notes, need_master)
    return LaunchEnv(launcher, chosen["rank"], chosen["world_size"], chosen["local_rank"],
                     chosen["local_world_size"], addr, port, tuple(notes), tuple(conflicts))


def _master(environ: Mapping[str, str], launcher: str, chosen: Dict[str, Optional[int]], notes: List[str],
            need_master: bool) -> Tuple[Optional[str], Optional[int]]:
    addr = environ.get("MASTER_ADDR") or None
    port = _int(environ, "MASTER_PORT")
    if launcher in _MPI:
        title = _TITLE[launcher]
        one_host = chosen["world_size"] is not None and chosen["local_world_size"] == chosen["world_size"]
        if addr is None and one_host:
            addr = "127.0.0.1"
            notes.append(f"MASTER_ADDR unset and all {chosen['world_size']} ranks on this host ({title}'s local "
                         "size equals its size): using 127.0.0.1")
        if addr is None and need_master:
            where = ("on several hosts" if chosen["local_world_size"] is not None
                     else "and its variables do not say whether they share one host")
            if launcher == "openmpi":
                how = "mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=29500 ..."
            else:
                how = "mpiexec -genv MASTER_ADDR <host of rank 0> -genv MASTER_PORT 29500 ..."
            raise ValueError(f"set MASTER_ADDR (the host of rank 0): {title} started {chosen['world_size']} ranks "
                             f"{where}; pass it to every rank: {how}")
        if port is None and addr is not None:
            port = DEFAULT_PORT
            notes.append(f"MASTER_PORT unset under {title}: using {DEFAULT_PORT} (torchrun's default); "
                         "set MASTER_PORT to run two jobs on one host")
    elif launcher == "slurm":
        if addr is None:
            name = next((n for n in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
                         if environ.get(n)), None)
            if name is not None:
                addr = expand_nodelist(environ[name], name)[0]
                notes.append(f"MASTER_ADDR unset: using {addr}, the first host of {name}")
            elif need_master:
                raise ValueError("set MASTER_ADDR (the host of rank 0): Slurm set no SLURM_JOB_NODELIST to take "
                                 "it from, e.g. srun --export=ALL,MASTER_ADDR=<host>,MASTER_PORT=29500 ...")
        if port is None:
            job = _int(environ, "SLURM_JOB_ID")
            if job is not None:
                port = SLURM_PORT_BASE + job % SLURM_PORT_SPAN
                notes.append(f"MASTER_PORT unset: using {port} = {SLURM_PORT_BASE} + SLURM_JOB_ID % "
                             f"{SLURM_PORT_SPAN} (the same on every task of the job)")
            elif need_master:
                raise ValueError("set MASTER_PORT: Slurm set no SLURM_JOB_ID to derive it from")
    return addr, port


_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def expand_nodelist(text: str, name: str = "SLURM_JOB_NODELIST") -> List[str]:
    """Slurm's compressed host list, expanded in order: "node[01-03,07],gpu5" ->
    ["node01", "node02", "node03", "node07", "gpu5"]. Zero padding is kept (the width of
    the range's first number); a name with several bracket groups expands to their product,
    the first group outermost. Anything else raises ValueError naming `name` and the text."""
    def bad(why: str) -> ValueError:
        return ValueError(f"{name}={text!r} is not a Slurm host list: {why}")

    if not text or not text.strip():
        raise bad("it is empty")
    hosts: List[str] = []
    for item in _split_top(text, bad):
        if not item:
            raise bad("an empty host name between commas")
        parts = []  # literal strings and lists of alternatives, in order
        pos = 0
        for m in _BRACKET.finditer(item):
            parts.append([item[pos:m.start()]])
            parts.append(_expand_group(m.group(1), bad))
            pos = m.end()
        parts.append([item[pos:]])
        if any(c in "[]" for p in parts if len(p) == 1 for c in p[0]):
            raise bad(f"unbalanced or nested brackets in {item!r}")
        names = [""]
        for alternatives in parts:
            names = [n + a for n in names for a in alternatives]
        hosts.extend(names)
    return hosts


def _split_top(text: str, bad) -> List[str]:
    """Split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
            if depth > 1:
                raise bad("nested brackets")
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise bad("a ']' without its '['")
        elif c == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    if depth:
        raise bad("a '[' without its ']'")
    items.append(text[start:].strip())
    return items


def _expand_group(body: str, bad) -> List[str]:
    out: List[str] = []
    for item in body.split(","):
        item = item.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if m is None:
            raise bad(f"[{body}] holds {item!r}, not a number or a range lo-hi")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise bad(f"the range {item} runs backwards")
        out += [str(k).zfill(len(lo)) for k in range(int(lo), int(hi) + 1)]
    return out


TORCH_VARS = {"rank": "RANK", "world_size": "WORLD_SIZE", "local_rank": "LOCAL_RANK",
              "local_world_size": "LOCAL_WORLD_SIZE", "master_addr": "MASTER_ADDR", "master_port": "MASTER_PORT"}


def export_torch_env(environ=None) -> LaunchEnv:
    """Fill torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT) in `environ` (default os.environ) from the launcher,
    never overwriting one already set, so that torch.distributed's env:// works under
    mpirun and srun:

        pycollect.export_torch_env()
        dist.init_process_group("gloo")      # or "pycollect", "nccl"

    Returns what detect() found; raises its ValueError where rank 0 cannot be found."""
    environ = os.environ if environ is None else environ
    env = detect(environ, need_master=True)
    for attr, var in TORCH_VARS.items():
        value = getattr(env, attr)
        if value is not None and not environ.get(var):
            environ[var] = str(value)
    return env


if __name__ == "__main__":
    found = detect()
    print(f"launcher={found.launcher} rank={found.rank} world_size={found.world_size} local_rank={found.local_rank} "
          f"local_world_size={found.local_world_size} master={found.master_addr}:{found.master_port}")
    for note in found.notes:
        print(f"  {note}")
