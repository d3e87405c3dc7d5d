"""DeepSpeed ZeRO stages on backend --backend, one torchrun launch for all stages given:

    DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 tests/frameworks/ds_train.py \
        --backend pycollect --out DIR zero1 zero2 zero3_offload

zero1: ZeRO-1, torch Adam.  zero2: ZeRO-2, optimizer offloaded to CPU (DeepSpeedCPUAdam).
zero3_offload: ZeRO-3 with optimizer and parameter offload (DeepSpeedCPUAdam).
Each stage trains a fresh copy of common.build_model() for --steps steps; the full
parameters (ZeRO-3: gathered) go to DIR/<stage>.rank<r>.pt.
"""
from __future__ import annotations

import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import common  # noqa: E402

ADAM = {"type": "Adam", "params": {"lr": common.LR}}


def config(stage: str, world: int) -> dict:
    cfg = {
        "train_micro_batch_size_per_gpu": common.ROWS,
        "train_batch_size": common.ROWS * world,
        "gradient_accumulation_steps": 1,
        "optimizer": dict(ADAM),
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if stage == "zero1":
        cfg["zero_optimization"] = {"stage": 1}
        cfg["optimizer"] = {"type": "Adam", "params": {"lr": common.LR, "torch_adam": True}}
    elif stage == "zero2":
        cfg["zero_optimization"] = {"stage": 2,
                                    "offload_optimizer": {"device": "cpu", "pin_memory": False}}
    elif stage == "zero3_offload":
        cfg["zero_optimization"] = {"stage": 3,
                                    "offload_optimizer": {"device": "cpu", "pin_memory": False},
                                    "offload_param": {"device": "cpu", "pin_memory": False}}
    else:
        raise SystemExit(f"unknown stage {stage}")
    return cfg


def main():
    a = common.args()
    deepspeed.init_distributed(dist_backend=a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    backend = dist.get_backend()
    assert backend == a.backend, (backend, a.backend)
    for stage in a.what or ["zero1", "zero2", "zero3_offload"]:
        model = common.build_model()
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                               config=config(stage, world))
        for step in range(a.steps):
            x, y = common.batch(rank, step)
            loss = common.loss_fn(engine(x), y)
            engine.backward(loss)
            engine.step()
        params = list(engine.module.named_parameters())
        with deepspeed.zero.GatheredParameters([p for _, p in params], enabled=stage.startswith("zero3")):
            common.save(a.out, stage, rank, backend, params)
        dist.barrier()
        if rank == 0:
            print(f"{stage}: {backend} done, last loss {loss.item():.6f}", flush=True)
        del engine
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
