"""Ray Train on backend --backend: a local Ray (no cluster), 2 CPU workers, TorchTrainer with
TorchConfig(backend=...). Started as a plain script (Ray starts the worker processes):

    python tests/frameworks/ray_train.py --backend pycollect --out DIR

The workers find "pycollect" through torch's backend autoload (pycollect's entry point),
so they need no `import pycollect`; they import `common` through PYTHONPATH (set by the
test to this folder), which Ray's local workers inherit.
"""
from __future__ import annotations

import os
import tempfile

import ray
import torch
import torch.distributed as dist
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer, prepare_model

import common


def train_func(cfg):
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    backend = dist.get_backend()
    assert backend == cfg["backend"], backend
    model = prepare_model(common.build_model())   # DistributedDataParallel on Ray's group
    optimizer = torch.optim.Adam(model.parameters(), lr=common.LR)
    for step in range(cfg["steps"]):
        x, y = common.batch(rank, step)
        optimizer.zero_grad()
        loss = common.loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    module = model.module if hasattr(model, "module") else model
    common.save(cfg["out"], "ray", rank, backend, module.named_parameters())
    if rank == 0:
        print(f"ray: {backend} last loss {loss.item():.6f}", flush=True)


def main():
    a = common.args()
    # Logical CPUs: 2 workers of 1 CPU each plus room for Train's own actors, on any machine.
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=True,
             object_store_memory=200 * 1024 * 1024)
    with tempfile.TemporaryDirectory() as storage:
        trainer = TorchTrainer(
            train_func,
            train_loop_config={"backend": a.backend, "out": os.path.abspath(a.out), "steps": a.steps},
            torch_config=TorchConfig(backend=a.backend),
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
            run_config=RunConfig(name=f"pycollect-ray-{a.backend}", storage_path=storage),
        )
        result = trainer.fit()
    if result.error is not None:
        raise SystemExit(f"ray: {a.backend} failed: {result.error!r}")
    print(f"ray: {a.backend} done", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
