"""Lightning on backend --backend (torchrun, 2 CPU ranks; Lightning reads torchrun's env):

    torchrun --nproc-per-node 2 tests/frameworks/lightning_train.py --backend pycollect --out DIR
"""
from __future__ import annotations

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.strategies import DDPStrategy
from torch.utils.data import DataLoader, IterableDataset

import common


class Batches(IterableDataset):
    """Each rank its own fixed batches, as in the other scripts (no sampler)."""

    def __init__(self, steps):
        self.steps = steps

    def __iter__(self):
        rank = dist.get_rank()
        return (common.batch(rank, step) for step in range(self.steps))


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = common.build_model()

    def training_step(self, batch, _):
        x, y = batch
        self.last_loss = common.loss_fn(self.net(x), y)
        return self.last_loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=common.LR)


def main():
    a = common.args()
    module = Module()
    trainer = L.Trainer(accelerator="cpu", devices=2, num_nodes=1, max_steps=a.steps,
                        strategy=DDPStrategy(process_group_backend=a.backend),
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, use_distributed_sampler=False)
    trainer.fit(module, DataLoader(Batches(a.steps), batch_size=None))
    backend = dist.get_backend()
    assert backend == a.backend, backend
    common.save(a.out, "lightning", trainer.global_rank, backend, module.net.named_parameters())
    dist.barrier()
    if trainer.global_rank == 0:
        print(f"lightning: {backend} done, last loss {module.last_loss.item():.6f}", flush=True)


if __name__ == "__main__":
    main()
