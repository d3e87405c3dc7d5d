"""torchrun restarts: a job whose worker dies is restarted by its agent and carries on from
its checkpoint (tests/restart_job.py). A module of its own, started first under
scripts/test.sh (tests/conftest.py): it is a minute and more of torchrun attempts, each
importing torch, that one worker waits on while the others run the rest; its three jobs run
at once."""
import os
import subprocess
import sys

import pytest
import shm_segments
import torch

from pycollect.launch import free_port


@pytest.mark.slow
def test_torchrun_restarts_carry_on_from_the_checkpoint(tmp_path):
    """`torchrun --max-restarts N` restarts every worker on the agent's store, which still
    holds the previous attempts' keys: each attempt's group keys are its own (store_scope),
    so the restarted job trains to the end, with the static rendezvous and 1 restart and
    with c10d and 2 (the last attempt meets the keys of two before it), and ends with an
    uninterrupted run's parameters; no shared-memory segment is left behind."""
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "restart_job.py")
    before = shm_segments.named()

    def start(name, crashes, *rdzv):
        out = tmp_path / name
        out.mkdir()
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--max-restarts", str(crashes), *rdzv, job, str(out), str(crashes)]
        return name, out, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                           cwd=tmp_path)

    def finish(started):
        name, out, p = started
        try:
            stdout, stderr = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, stderr = p.communicate()
        assert p.returncode == 0, f"{name}: exit {p.returncode}\n{stdout[-2000:]}\n{stderr[-4000:]}"
        return torch.load(out / "final.pt")

    # The three jobs at once: each is mostly its agent and workers starting and waiting.
    jobs = [start("straight", 0, "--master-port", str(free_port())),
            start("static", 1, "--master-port", str(free_port())),
            start("c10d", 2, "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}")]
    try:
        straight, static, c10d = [finish(j) for j in jobs]
    finally:
        for _, _, p in jobs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert (straight["attempt"], static["attempt"], c10d["attempt"]) == (0, 1, 2)
    for name, got in (("static", static), ("c10d", c10d)):
        for key, want in straight["model"].items():
            assert torch.equal(got["model"][key], want), f"{name}: {key} differs from the uninterrupted run"
    stuck = shm_segments.left_behind(before)
    assert not stuck, f"shared-memory segments left behind: {stuck}"
