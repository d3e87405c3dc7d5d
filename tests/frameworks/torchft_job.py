"""What the torchft jobs (torchft_ddp.py, torchft_hsdp.py) share: the model every replica
group starts from, the Manager on a ProcessGroupPycollect, and the training loop that
writes the progress the test watches and the final state it compares."""
import os
import time
from datetime import timedelta

import torch
from torchft import Manager

from pycollect.torch_backend.torchft import ProcessGroupPycollect


def model() -> torch.nn.Module:
    """The same initial weights in every replica group and rank (seed 0)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def manager(replica_id: str, state_dict, load_state_dict) -> Manager:
    """torchft's Manager across replica groups, on pycollect (short timeouts: the test kills one)."""
    return Manager(pg=ProcessGroupPycollect(timeout=timedelta(seconds=10)), min_replica_size=1,
                   load_state_dict=load_state_dict, state_dict=state_dict, replica_id=replica_id,
                   timeout=timedelta(seconds=10), quorum_retries=3)


def last_step(out: str, steps: int) -> int:
    """Where training ends: `steps`, or the step the test wrote into OUT/stop since (it sets the
    end once a killed replica group has rejoined, so the other cannot finish before it is back)."""
    try:
        with open(os.path.join(out, "stop")) as f:
            return int(f.read())
    except (FileNotFoundError, ValueError):
        return steps


def train(manager: Manager, optimizer, forward, out: str, replica: str, rank: int, steps: int) -> None:
    """Steps until the Manager reached last_step(), rank r on its own batches (the same in every
    replica group), appending "step time" to OUT/progress.REPLICA.RANK after each."""
    progress = open(os.path.join(out, f"progress.{replica}.{rank}"), "a", buffering=1)
    while manager.current_step() < last_step(out, steps):
        step = manager.current_step()
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1000 * step + rank))
        optimizer.zero_grad()
        forward(x).pow(2).mean().backward()
        optimizer.step()
        progress.write(f"{manager.current_step()} {time.time()}\n")
        time.sleep(0.05)  # a step of real work: the test has time to kill a replica group mid-run
