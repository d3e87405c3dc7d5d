"""torchft FT-HSDP on pycollect: FSDP2 shards the model over the ranks of a replica group (a
torchrun job on "pycollect": reduce-scatter there, which torchft's Gloo group lacks), and
torchft's Manager all-reduces each gradient shard with the same shard of the other replica
groups (FSDP2's all-reduce hook) on a ProcessGroupPycollect. Run as torchft_ddp.py is
(tests/test_torchft.py kills one replica group mid-training and starts it again):

    REPLICA_GROUP_ID=0 torchrun --nproc-per-node 2 --master-port 29600 torchft_hsdp.py OUT STEPS

The live checkpoint a joining group heals from is each rank's own shards (plain tensors: rank
r holds the same shards in every replica group), loaded back into its parameters' shards. At
the end each rank also writes OUT/calls.REPLICA.RANK.json: the calls its replica group's own
"pycollect" group ran (FSDP2's all-gathers and reduce-scatters).
"""
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torchft.optim import OptimizerWrapper

import torchft_job
from pycollect.torch_backend import engine_group


def main(out: str, steps: int) -> None:
    replica, rank = os.environ["REPLICA_GROUP_ID"], int(os.environ["RANK"])
    dist.init_process_group("pycollect", timeout=timedelta(seconds=30))
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("shard",))
    model = torchft_job.model()
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    # The sharded parameters (DTensors), taken once: torchft asks for the state dict from its
    # own thread, maybe mid-step, where model.state_dict() would reshard FSDP2's parameters
    # under the running backward.
    sharded = dict(model.named_parameters())

    def state_dict():
        return {"shards": {k: p.to_local().detach().clone() for k, p in sharded.items()}}

    def load_state_dict(state):
        with torch.no_grad():
            for k, p in sharded.items():
                p.to_local().copy_(state["shards"][k])

    manager = torchft_job.manager(f"hsdp_{replica}", state_dict, load_state_dict)

    def across_replicas(shard: torch.Tensor) -> None:  # the averaged gradient shard, in place
        manager.allreduce(shard).wait()

    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_all_reduce_hook(across_replicas)
    torchft_job.train(manager, OptimizerWrapper(manager, inner), model, out, replica, rank, steps)
    torch.save(state_dict()["shards"], os.path.join(out, f"final.{replica}.{rank}.pt"))
    with open(os.path.join(out, f"calls.{replica}.{rank}.json"), "w") as f:  # FSDP2's calls, on the engine
        json.dump(engine_group(dist.group.WORLD).counters(), f)
    manager.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
