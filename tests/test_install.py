"""The user's path: a copy of the source tree, `pip install .` (build isolation on, so its
build has no torch and makes the engine alone) into a new virtual environment that has
torch, then a 2-rank DDP step on "pycollect" under torchrun (each rank's gradients against
the mean over both ranks' batches, computed alone). The first group compiles the torch backend (torch_backend/builder.py): one rank compiles, the other waits for it, and
one line says so; a second run loads it from the cache without a word.

Not part of the default suite (bash scripts/test.sh): it makes a virtual environment with
torch and builds pycollect twice over (minutes of CPU). `bash scripts/test_install.sh` runs
it with TEST_INSTALL=1; CI (.ci/run) does so after the suite."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

if os.environ.get("TEST_INSTALL") != "1":
    pytest.skip("install tier: run `bash scripts/test_install.sh` (a new venv, pip install ., the first-use "
                "build; sets TEST_INSTALL=1)", allow_module_level=True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

JOB = textwrap.dedent("""
    import copy
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("pycollect")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    alone = copy.deepcopy(model)
    batches = [torch.randn(5, 8, generator=torch.Generator().manual_seed(1 + r)) for r in range(size)]
    ddp = DDP(model)  # kept: its reducer all-reduces during the backward pass
    ddp(batches[rank]).square().sum().backward()  # each rank its own batch
    for b in batches:  # the gradient DDP must give every rank: the mean over the ranks' batches
        alone(b).square().sum().backward()
    for p, q in zip(model.parameters(), alone.parameters()):
        assert torch.allclose(p.grad, q.grad / size, rtol=1e-5, atol=1e-6), (p.grad, q.grad / size)
    from pycollect import _torch
    import sys
    sys.stdout.write(f"rank {rank}: DDP step on {dist.get_backend()} module {_torch.__file__}\\n")  # one write
    dist.destroy_process_group()
""")


def _run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert p.returncode == 0, f"{cmd}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


@pytest.mark.slow
def test_pip_install_without_torch_in_the_build_then_ddp_on_pycollect(tmp_path):
    import torch

    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "build", "__pycache__", "*.so"))
    env = dict(os.environ, PYCOLLECT_CACHE_DIR=str(tmp_path / "cache"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=120)
    py = str(venv / "bin" / "python")
    # The torch this suite runs (a CPU build from local disk on these machines), then pycollect
    # the way most users install it: isolated, so its build cannot see that torch.
    _run([py, "-m", "pip", "install", "-q", f"torch=={torch.__version__.split('+')[0]}", "numpy"], env=env,
         timeout=600)
    installed = _run([py, "-m", "pip", "install", "-q", str(src)], env=env, timeout=900)
    package = _run([py, "-c", "import pycollect, os; print(os.path.dirname(pycollect.__file__))"], env=env,
                   cwd=tmp_path, timeout=60).stdout.strip()
    names = os.listdir(package)
    assert not any(n.startswith("_torch.") and n.endswith(".so") for n in names), names  # no backend built
    assert os.path.isdir(os.path.join(package, "_csrc", "torch_backend")), names  # its sources instead

    job = tmp_path / "job.py"
    job.write_text(JOB)
    launch = [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(job)]
    first = _run(launch, env=env, cwd=tmp_path, timeout=600)
    said = first.stdout + first.stderr
    assert said.count("compiling its torch backend") == 1, said  # one rank compiled, one waited
    assert "rank 0: DDP step on pycollect" in said and "rank 1: DDP step on pycollect" in said, said
    assert str(tmp_path / "cache" / "torch-backend") in said, said
    second = _run(launch, env=env, cwd=tmp_path, timeout=300)
    said = second.stdout + second.stderr
    assert "compiling" not in said and "rank 1: DDP step on pycollect" in said, said
    print(installed.stdout[-500:])
