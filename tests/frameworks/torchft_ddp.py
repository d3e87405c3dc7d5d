"""torchft FT-DDP on pycollect: one replica group per torchrun job (docs/frameworks.md; run by
tests/test_torchft.py, which kills one replica group mid-training and starts it again).

    torchft_lighthouse --min_replicas 1 --quorum_tick_ms 100 --join_timeout_ms 10000 &
    export TORCHFT_LIGHTHOUSE=http://localhost:29510
    REPLICA_GROUP_ID=0 torchrun --nproc-per-node 2 --master-port 29600 torchft_ddp.py OUT STEPS
    REPLICA_GROUP_ID=1 torchrun --nproc-per-node 2 --master-port 29601 torchft_ddp.py OUT STEPS

Rank r of every replica group trains the same model on the same batches; torchft's Manager
all-reduces its gradients with rank r of the other replica groups on a pycollect group
(ProcessGroupPycollect), reconfigured whenever a replica group leaves or joins, and a
group that joins late heals from a live checkpoint of a healthy one. Each rank appends
"step time" to OUT/progress.REPLICA.RANK after every step and saves its final parameters to
OUT/final.REPLICA.RANK.pt once the Manager reached STEPS.
"""
import os
import sys

import torch
from torchft import DistributedDataParallel
from torchft.optim import OptimizerWrapper

import torchft_job


def main(out: str, steps: int) -> None:
    replica, rank = os.environ["REPLICA_GROUP_ID"], int(os.environ["RANK"])
    model = torchft_job.model()
    inner = torch.optim.SGD(model.parameters(), lr=0.05)

    def state_dict():
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    def load_state_dict(state):
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["optim"])

    manager = torchft_job.manager(f"ddp_{replica}", state_dict, load_state_dict)
    ddp = DistributedDataParallel(manager, model)
    torchft_job.train(manager, OptimizerWrapper(manager, inner), ddp, out, replica, rank, steps)
    torch.save(model.state_dict(), os.path.join(out, f"final.{replica}.{rank}.pt"))
    manager.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
