"""Hugging Face Accelerate on backend --backend (torchrun, 2 CPU ranks):

    torchrun --nproc-per-node 2 tests/frameworks/accelerate_train.py --backend pycollect --out DIR

The process group is created FIRST: Accelerate's CPU path would otherwise call
init_process_group("gloo") itself; with a group already there it adopts it.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from accelerate import Accelerator

import common


def main():
    a = common.args()
    dist.init_process_group(a.backend)         # before Accelerator(): it keeps this group
    accelerator = Accelerator(cpu=True)
    backend = dist.get_backend()
    assert backend == a.backend and accelerator.num_processes == dist.get_world_size(), backend
    rank = accelerator.process_index
    model = common.build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=common.LR)
    model, optimizer = accelerator.prepare(model, optimizer)
    for step in range(a.steps):
        x, y = common.batch(rank, step)
        optimizer.zero_grad()
        loss = common.loss_fn(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
    common.save(a.out, "accelerate", rank, backend, accelerator.unwrap_model(model).named_parameters())
    accelerator.wait_for_everyone()
    if rank == 0:
        print(f"accelerate: {backend} done, last loss {loss.item():.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
