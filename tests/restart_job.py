"""A torchrun job for tests/test_restarts.py: DDP on the "pycollect" backend that checkpoints
every step, and whose local rank 1 dies (os._exit(13)) at step 10 of each of the first
CRASHES attempts. Every attempt resumes from the checkpoint, so the run ends with the
parameters of an uninterrupted one.

    torchrun --nproc-per-node 2 --max-restarts N restart_job.py DIR CRASHES
"""
import os
import sys

import torch
import torch.distributed as dist

STEPS = 20


def main(out_dir: str, crashes: int) -> None:
    dist.init_process_group("pycollect")
    rank = dist.get_rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ckpt = os.path.join(out_dir, "ckpt.pt")
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        start = state["step"] + 1
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for step in range(start, STEPS):
        if step == 10 and rank == 1 and attempt < crashes:
            os._exit(13)
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(step * 10 + rank))
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            torch.save({"model": model.state_dict(), "step": step}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        dist.barrier()
    if rank == 0:
        torch.save({"model": model.state_dict(), "attempt": attempt}, os.path.join(out_dir, "final.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
