"""torchft on pycollect (pycollect.torch_backend.torchft.ProcessGroupPycollect), against
torchft's own Gloo group in the same run: torchft's own tests, run on both.

- process_group_test: every collective torchft uses, at 3 ranks (threads of this process, as
  torchft's MultiPgBaseTest runs them), healthy and with a rank lost and the group
  reconfigured without it; Gloo's group skips all-to-all and both reduce-scatters (it has
  none), pycollect's runs them all. Also torchft's one-rank API test with DDP on top.
- manager_integ_test: DDP under torchft's Manager with the Rust lighthouse, 2 replica groups
  (1 and 2 ranks each), healthy and recovering from a replica group that fails mid-training
  and rejoins from a live checkpoint: the final parameters equal across replicas.
- local_sgd_integ_test: LocalSGD and DiLoCo (plain and streaming), healthy and recovering.

torchft's tests build their groups with torchft.process_group.ProcessGroupGloo by name; each
pycollect case swaps that name for ProcessGroupPycollect in the test's module and checks that
pycollect's groups were the ones made. Framework tier (scripts/test_frameworks.sh installs
torchft); skipped without TEST_FRAMEWORKS=1.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import unittest

import pytest

if os.environ.get("TEST_FRAMEWORKS") != "1":
    pytest.skip("framework tier: run `bash scripts/test_frameworks.sh` (installs torchft; sets TEST_FRAMEWORKS=1)",
                allow_module_level=True)
pytest.importorskip("torchft", reason="torchft is not installed (bash scripts/test_frameworks.sh installs it)")

from datetime import timedelta  # noqa: E402

import torch  # noqa: E402
from parameterized import parameterized  # noqa: E402
from torch.distributed import TCPStore  # noqa: E402
from torchft import local_sgd_integ_test, manager_integ_test  # noqa: E402
from torchft._test import diloco_trainer  # noqa: E402 - DiLoCo's trainer, behind local_sgd_integ_test
from torchft.process_group_test import _ALL_COLLECTIVES, MultiPgBaseTest, _test_pg  # noqa: E402
from torchft.process_group_test import NormalGlooMultiPgTest  # noqa: E402,F401 - Gloo's, collected beside ours

from pycollect.launch import free_port  # noqa: E402
from pycollect.torch_backend.torchft import ProcessGroupPycollect  # noqa: E402

pytestmark = pytest.mark.slow

MADE: list = []  # every pycollect group a swapped-in test made


class CountedPycollect(ProcessGroupPycollect):
    def _create_pg(self, store, rank: int, world_size: int):
        MADE.append((rank, world_size))
        return super()._create_pg(store, rank, world_size)


class PycollectMultiPgTest(MultiPgBaseTest):
    """torchft's multi-rank process-group test on pycollect: every collective, none skipped."""

    BACKEND = "pycollect"
    WORLD_SIZE = 3

    @classmethod
    def _create_pg(cls, backend: str):
        return CountedPycollect(timeout=timedelta(seconds=10))

    @parameterized.expand(_ALL_COLLECTIVES)
    def test_collective(self, collective: str) -> None:
        self._run_parallel(collective, device="cpu")

    @parameterized.expand(_ALL_COLLECTIVES)
    def test_collective_with_resiliency(self, collective: str) -> None:
        self._run_with_resiliency(collective, device="cpu")


def test_one_rank_apis_and_ddp():
    """torchft's test_gloo_apis on pycollect: every API at world size 1, then DDP over it."""
    store = TCPStore(host_name="localhost", port=0, is_master=True, wait_for_workers=False)
    pg = ProcessGroupPycollect()
    pg.configure(f"localhost:{store.port}/prefix", "0", 0, 1)
    assert pg.size() == 1 and pg.getBackendName() == "torchft-pycollect"
    _test_pg(pg, torch.tensor([2]))
    m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 4), process_group=pg)
    m(torch.rand(2, 3))
    assert pg.errored() is None


def test_a_rank_that_never_comes_is_a_timeout_naming_it():
    """configure() for 2 ranks that only one joins ends within the timeout, naming the other."""
    store = TCPStore(host_name="localhost", port=0, is_master=True, wait_for_workers=False)
    pg = ProcessGroupPycollect(timeout=timedelta(seconds=0.5))
    with pytest.raises(Exception, match="rank 1 did not join"):
        pg.configure(f"localhost:{store.port}/prefix", "0", 0, 2)


def _replica_group(job: str, replica: int, lighthouse: str, out: str, steps: int) -> subprocess.Popen:
    """One replica group of tests/frameworks/torchft_<job>.py: a torchrun job of 2 ranks, its
    output in OUT/job.REPLICA.N.log."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "frameworks", f"torchft_{job}.py")
    env = dict(os.environ, REPLICA_GROUP_ID=str(replica), TORCHFT_LIGHTHOUSE=lighthouse, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
           str(free_port()), script, out, str(steps)]
    log = open(os.path.join(out, f"job.{replica}.{len(os.listdir(out))}.log"), "w")
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def _kill_tree(pid: int) -> None:
    """SIGKILL a torchrun job: its agent and every process below it (torchrun starts each rank
    of a script in a session of its own, so killing the agent's process group leaves them)."""
    children: dict = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _logs(out: str) -> str:
    """Every job's log, the tail of each: what a failed run says."""
    text = []
    for name in sorted(n for n in os.listdir(out) if n.startswith("job.")):
        with open(os.path.join(out, name)) as f:
            text.append(f"--- {name}\n{f.read()[-6000:]}")
    return "\n".join(text)


def _steps(out: str, replica: int) -> list:
    """The steps replica group `replica`'s rank 0 has logged: [(step, time), ...]."""
    path = os.path.join(out, f"progress.{replica}.0")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [(int(a), float(b)) for a, b in (line.split() for line in f if line.count(" ") == 1)]


def _wait(what: str, cond, timeout: float = 120.0, out: str = None, jobs=()) -> None:
    """Until cond(); else fails naming `what`, with each job's exit code (None: still running)
    and the tail of every job's log in `out`."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() >= deadline:
            codes = [proc.poll() for proc in jobs]
            pytest.fail(f"timed out waiting for {what}; the jobs' exit codes {codes}\n" + (_logs(out) if out else ""))
        time.sleep(0.1)


@pytest.mark.parametrize("job", ["ddp", "hsdp"])
def test_ft_replica_group_killed_and_rejoined(tmp_path, job):
    """Two replica groups of 2 ranks under torchft's lighthouse train on pycollect (FT-DDP;
    FT-HSDP: FSDP2 over each group's ranks, reduce-scatter on "pycollect", the Manager's
    all-reduce across groups); replica group 1 is SIGKILLed (its torchrun and both ranks)
    mid-training. Replica group 0 keeps stepping alone; group 1, started again, heals from
    group 0's live checkpoint (its first step is past 0) and both end at the same step with
    the same parameters (or shards), rank by rank. Where they end is set once group 1 is back
    (OUT/stop: 20 steps on), so group 0 cannot finish while group 1 restarts (it did, at a
    fixed 80 steps, when the restart took longer than group 0's remaining steps)."""
    from torchft._torchft import LighthouseServer

    steps, out = 100_000, str(tmp_path)
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=2000)
    jobs = [_replica_group(job, r, lighthouse.address(), out, steps) for r in (0, 1)]
    try:
        _wait("both replica groups to step", lambda: len(_steps(out, 0)) >= 10 and len(_steps(out, 1)) >= 10,
              out=out, jobs=jobs)
        _kill_tree(jobs[1].pid)
        jobs[1].wait(30)
        killed_at, before = time.time(), len(_steps(out, 1))
        _wait("replica group 0 to step on alone", lambda: len([s for s, t in _steps(out, 0) if t > killed_at]) >= 5,
              out=out, jobs=jobs)
        jobs[1] = _replica_group(job, 1, lighthouse.address(), out, steps)
        _wait("replica group 1 to rejoin", lambda: len(_steps(out, 1)) > before, out=out, jobs=jobs)
        end = max(s for r in (0, 1) for s, _ in _steps(out, r)) + 20
        with open(os.path.join(out, "stop.tmp"), "w") as f:
            f.write(str(end))
        os.replace(os.path.join(out, "stop.tmp"), os.path.join(out, "stop"))  # read whole or not at all
        for proc in jobs:
            proc.wait(timeout=300)
            assert proc.returncode == 0, _logs(out)
    finally:
        for proc in jobs:
            if proc.poll() is None:
                _kill_tree(proc.pid)
        lighthouse.shutdown()
    rejoined = _steps(out, 1)[before:]
    assert rejoined and rejoined[0][0] > 1, f"replica group 1 did not heal from a live checkpoint: {rejoined[:3]}"
    for rank in (0, 1):
        a, b = (torch.load(os.path.join(out, f"final.{r}.{rank}.pt")) for r in (0, 1))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f"rank {rank}: replicas differ"
        if job == "hsdp":  # FSDP2 ran on the replica group's "pycollect" group
            with open(os.path.join(out, f"calls.0.{rank}.json")) as f:
                calls = json.load(f)
            assert calls.get("reduce_scatter", 0) > 0 and calls.get("all_gather", 0) > 0, calls


def _run(case: unittest.TestCase) -> None:
    result = unittest.TestResult()
    case.run(result)
    assert result.wasSuccessful(), result.errors + result.failures


@pytest.mark.parametrize("backend", ["gloo", "pycollect"])
@pytest.mark.parametrize("name", ["test_ddp_healthy", "test_ddp_recovery_0_async_quorum",
                                  "test_ddp_recovery_1_sync_quorum", "test_ddp_recovery_multi_rank"])
def test_manager_ddp(monkeypatch, backend, name):
    MADE.clear()
    if backend == "pycollect":
        monkeypatch.setattr(manager_integ_test, "ProcessGroupGloo", CountedPycollect)
    _run(manager_integ_test.ManagerIntegTest(name))
    assert bool(MADE) == (backend == "pycollect"), MADE


@pytest.mark.parametrize("backend", ["gloo", "pycollect"])
@pytest.mark.parametrize("name", ["test_local_sgd_recovery_0", "test_diloco_healthy_0", "test_diloco_recovery_0",
                                  "test_streaming_diloco_recovery_0", "test_streaming_diloco_commit_failure_00",
                                  "test_streaming_diloco_upscale_00"])
def test_local_sgd_and_diloco(monkeypatch, backend, name):
    MADE.clear()
    if backend == "pycollect":
        for module in (local_sgd_integ_test, diloco_trainer):
            monkeypatch.setattr(module, "ProcessGroupGloo", CountedPycollect)
    _run(local_sgd_integ_test.LocalSGDIntegTest(name))
    assert bool(MADE) == (backend == "pycollect"), MADE
