"""Real-GPU checks (2 ranks on cuda:0); skipped where torch sees no CUDA device.

The bulk of the checks is scripts/gpu_check.py's (the same code the GPU check runs):
every call x dtypes x ops on CUDA tensors against a CPU reference and Gloo on the same
tensors, bit-identical across ranks, stream order (the host-free wait too), and one DDP / FSDP / torch-backend
step against torch DDP over Gloo. Without a GPU, test_staging.py drives the same
pipeline through the host device, and test_device_gpu_check_dry_run runs the script.
"""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", os.path.join(ROOT, "scripts", "gpu_check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(job):
    from pycollect.launch import run_ranks

    env = {"PYCOLLECT_STAGING_BYTES": str(_gpu_check().STAGING_BYTES)}
    return run_ranks(job, 2, ("pycollect", "gloo"), job_args=(False,), timeout=400, env=env)


@pytest.mark.slow
def test_cuda_collectives_match_reference_and_gloo():
    res = _run(_gpu_check().correctness_job)
    assert res[0]["checked"] > 100
    assert not [f for r in res for f in r["failures"]]
    assert res[0]["digests"] == res[1]["digests"]
    assert res[0]["stream"] == "ok" and res[1]["stream"] == "ok"
    assert all(r["host_free"]["ok"] for r in res), [r["host_free"] for r in res]


@pytest.mark.slow
def test_cuda_training_steps_match_torch_ddp():
    out = _run(_gpu_check().training_job)[0]
    assert out["_backend_all_reduces"] > 0
    for name, (dloss, dparam) in ((k, v) for k, v in out.items() if not k.startswith("_")):
        assert dloss < 1e-5, name
        assert dparam is None or dparam < 1e-5, name


def case_cuda_errors():
    import pycollect as pc

    cpu, gpu = torch.ones(4), torch.ones(4, device="cuda:0")
    out = torch.empty(8, device="cuda:0")
    errors = []
    for call in (lambda: pc.all_gather_into_tensor(out, cpu), lambda: pc.all_gather_into_tensor(torch.empty(8), gpu)):
        try:
            call()
        except ValueError as e:
            errors.append(str(e))
    pc.all_reduce(gpu)  # the group is still in step (nothing was sent above)
    return errors, float(gpu[0].cpu())


def test_cuda_mixed_devices_refused_before_sending():
    from rank_pool import RankPool

    with RankPool(2, timeout=120) as pool:
        for errors, value in pool.run(case_cuda_errors):
            assert len(errors) == 2 and all("mixed" in e for e in errors), errors
            assert value == 2.0
