"""Frameworks on the "pycollect" torch.distributed backend, against Gloo: DeepSpeed ZeRO-1,
ZeRO-2 (optimizer offload) and ZeRO-3 (optimizer and parameter offload), Hugging Face
Accelerate, Ray Train and Lightning (docs/frameworks.md).

Each case trains common.build_model() (a 2-layer MLP, seed 0, 5 Adam steps, each rank its own
fixed batches; tests/frameworks/) on 2 CPU ranks, once with backend "pycollect" and once
with "gloo", as separate jobs; every rank writes its final parameters and the test compares
them rank by rank. They must be bit-identical: with 2 ranks every reduction is one
addition a+b, which gives the same bits whichever engine and order computes it, and the
rest of each step (Adam, ZeRO's partitioning, offload) is the same code on the same data.
Also checked: the parameters moved from their initial values, both ranks hold the same
replica, and pycollect's own engine counted the collectives (so the run was not on Gloo).

Not part of the default suite (bash scripts/test.sh): these need the frameworks, which
take minutes to install. `bash scripts/test_frameworks.sh` installs them and runs this
file with TEST_FRAMEWORKS=1; a framework that is not installed is skipped with
the reason.
"""
from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import warnings

import pytest

if os.environ.get("TEST_FRAMEWORKS") != "1":
    pytest.skip("framework tier: run `bash scripts/test_frameworks.sh` (installs DeepSpeed, Accelerate, "
                "Ray Train, Lightning; sets TEST_FRAMEWORKS=1)", allow_module_level=True)

import torch  # noqa: E402

from pycollect.launch import free_port  # noqa: E402

pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "frameworks")
BACKENDS = ("pycollect", "gloo")
DS_STAGES = ("zero1", "zero2", "zero3_offload")
# A job's limit. DeepSpeed's first use compiles its CPU ops (cpu_adam, shm comm: ~1-2 min
# each on 2 cores; scripts/test_frameworks.sh builds them before pytest); a warm run of
# every job takes 6-40 s.
TIMEOUT = {"deepspeed": 900, "ray": 300}
DEFAULT_TIMEOUT = 300


def _load_common():
    spec = importlib.util.spec_from_file_location("pycollect_framework_common",
                                                  os.path.join(SCRIPTS, "common.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


common = _load_common()


def need(module: str):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (bash scripts/test_frameworks.sh installs it; "
                    f"its output says why it could not)")


def launch(framework: str, script: str, backend: str, out: str, *what: str) -> str:
    """Runs one job (2 ranks) to the end; its output, or the test fails with its tail. A job
    whose rank died by a signal is run once more, with a warning that carries the first
    run's tail: one DeepSpeed job on "pycollect" died once by SIGABRT on a machine at load
    26 and never again in 30 runs (PYTHONFAULTHANDLER now prints the stacks of such a death)."""
    first = _launch_once(framework, script, backend, out, *what)
    if isinstance(first, str):
        return first
    warnings.warn(f"{framework}/{backend}: a rank died by a signal; run once more. Its tail:\n{first[1][-6000:]}")
    again = _launch_once(framework, script, backend, out, *what)
    if isinstance(again, str):
        return again
    pytest.fail(f"{framework}/{backend}: exit {again[0]}, twice\n{again[1][-6000:]}")


def _launch_once(framework: str, script: str, backend: str, out: str, *what: str):
    """One run of the job: its output, or (exit code, output) when a rank died by a signal."""
    env = dict(os.environ, PYTHONPATH=SCRIPTS + os.pathsep + os.environ.get("PYTHONPATH", ""),
               DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
    args = [os.path.join(SCRIPTS, script), "--backend", backend, "--out", out, *what]
    if framework == "ray":  # Ray starts its own workers
        cmd = [sys.executable, *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()), *args]
    timeout = TIMEOUT.get(framework, DEFAULT_TIMEOUT)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)  # its own group: a timeout ends every rank
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"{framework}/{backend}: no end after {timeout} s\n{output[-6000:]}")
    if proc.returncode < 0 or re.search(r"exitcode\s*:\s*-\d+", output):  # the job, or a rank under torchrun
        return proc.returncode, output
    if proc.returncode != 0:
        pytest.fail(f"{framework}/{backend}: exit {proc.returncode}\n{output[-6000:]}")
    return output


def run_both(framework: str, script: str, tmp, *what: str) -> dict:
    """{backend: output folder} after one job per backend, pycollect first."""
    outs = {}
    for backend in BACKENDS:
        outs[backend] = str(tmp / backend)
        launch(framework, script, backend, outs[backend], *what)
    return outs


def compare(outs: dict, tag: str) -> None:
    initial = torch.cat([p.detach().reshape(-1) for p in common.build_model().parameters()])
    for rank in (0, 1):
        got = {b: torch.load(os.path.join(outs[b], f"{tag}.rank{rank}.pt")) for b in BACKENDS}
        pc, gloo = got["pycollect"], got["gloo"]
        assert (pc["backend"], gloo["backend"]) == BACKENDS
        assert sum(pc["counters"].values()) > 0, f"pycollect's engine counted no call: {pc['counters']}"
        assert pc["names"] == gloo["names"] and pc["flat"].shape == initial.shape
        assert not torch.equal(pc["flat"], initial), "the parameters did not move"
        diff = (pc["flat"] - gloo["flat"]).abs().max().item()
        assert torch.equal(pc["flat"], gloo["flat"]), \
            f"{tag} rank {rank}: pycollect and Gloo differ, largest difference {diff:.3g}"
    replica = [torch.load(os.path.join(outs["pycollect"], f"{tag}.rank{r}.pt"))["flat"] for r in (0, 1)]
    assert torch.equal(*replica), f"{tag}: rank 0 and rank 1 hold different parameters"


@pytest.fixture(scope="module")
def deepspeed_runs(tmp_path_factory):
    """Both backends, every stage in one job each (a stage trains a fresh model)."""
    need("deepspeed")
    return run_both("deepspeed", "ds_train.py", tmp_path_factory.mktemp("deepspeed"), *DS_STAGES)


@pytest.mark.parametrize("stage", DS_STAGES)
def test_deepspeed(deepspeed_runs, stage):
    compare(deepspeed_runs, stage)


def test_accelerate(tmp_path):
    need("accelerate")
    compare(run_both("accelerate", "accelerate_train.py", tmp_path), "accelerate")


def test_ray_train(tmp_path):
    need("ray")
    compare(run_both("ray", "ray_train.py", tmp_path), "ray")


def test_lightning(tmp_path):
    need("lightning")
    compare(run_both("lightning", "lightning_train.py", tmp_path), "lightning")
