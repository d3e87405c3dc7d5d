"""A torchrun script: train the demo's MLP with data parallelism on pycollect, print one
JSON line per rank with, per training, a digest of the final parameters (tests/test_netns_hosts.py).

    torchrun --nnodes 2 --nproc-per-node 1 --node-rank K --master-addr A --master-port P \\
        tests/netns_train.py [steps]

Two trainings, one after the other in the same process (one torchrun start serves both):
pycollect: pc.init_process_group() from torchrun's environment, pycollect.DistributedDataParallel;
torch:     dist.init_process_group("pycollect"), torch's DistributedDataParallel on pycollect's engine.
Each rank starts from different weights (DDP must broadcast rank 0's) and its own slice of the batch.
"""
import hashlib
import json
import sys

import torch
import torch.distributed as dist

import pycollect as pc
from pycollect.demo import models


def train(mode: str, steps: int) -> dict:
    if mode == "pycollect":
        pc.init_process_group()
        rank, world = pc.get_rank(), pc.get_world_size()
        wrap = pc.DistributedDataParallel
    else:
        dist.init_process_group("pycollect")
        rank, world = dist.get_rank(), dist.get_world_size()
        wrap = torch.nn.parallel.DistributedDataParallel
    model = models.build_model("mlp", 1 + rank)
    ddp = wrap(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        x, y = models.batch("mlp", step, 0, world, rank)
        opt.zero_grad(set_to_none=True)
        loss = models.loss_fn("mlp", ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    if mode == "pycollect":
        pc.destroy_process_group()
    else:
        dist.destroy_process_group()
    return {"rank": rank, "world": world, "losses": losses, "digest": hashlib.sha1(flat.numpy().tobytes()).hexdigest(),
            "param_sum": float(flat.double().sum())}


if __name__ == "__main__":
    torch.set_num_threads(1)
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    print(json.dumps({mode: train(mode, steps) for mode in ("pycollect", "torch")}), flush=True)
