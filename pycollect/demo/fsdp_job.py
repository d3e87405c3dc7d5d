"""`pycollect demo --fsdp`: train a small GPT on local ranks with FSDP, then with DDP,
and show what each rank holds.

    from pycollect.demo import fsdp_job
    fsdp_job.main(world_size=2, steps=8)

Each rank is a process on loopback, started by pycollect.launch.run_ranks. The ranks
send their losses and memory figures to this process as events, which prints a progress line per step
and, at the end, one table row per rank and mode: parameter, gradient and optimizer
bytes, the peak of gathered (unsharded) parameter bytes, and the peak resident memory
measured over the training steps.
"""
from __future__ import annotations

import time

DEMO_CONFIG = dict(vocab=256, seq=32, dim=64, layers=4, heads=4, tied=True)
BATCH_PER_RANK = 4


def _train(mode, model, cfg, steps, rank, world, emit):
    import torch

    from .. import api as pc
    from ..fsdp import memory_stats, model_state_bytes, peak_rss_bytes, reset_peak_rss
    from .gpt import counting_batch, lm_loss

    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    reset_peak_rss()
    times = []
    for step in range(steps):
        start = time.perf_counter()
        tokens, targets = counting_batch(cfg, BATCH_PER_RANK * world, seed=step)
        rows = slice(rank * BATCH_PER_RANK, (rank + 1) * BATCH_PER_RANK)
        loss = lm_loss(model(tokens[rows]), targets[rows])
        opt.zero_grad()
        loss.backward()  # both wrappers have averaged the gradients when this returns
        opt.step()
        times.append(time.perf_counter() - start)
        mean = loss.detach().reshape(1).clone()
        pc.all_reduce(mean, op=pc.ReduceOp.AVG)
        if rank == 0:
            emit("loss", mode, step, steps, mean.item())
    stats = memory_stats(model, opt) if mode == "FSDP" else model_state_bytes(model, opt)
    peak = max(stats.get("peak_unsharded_bytes", {"-": 0}).values() or [0])
    emit("mem", mode, rank, stats["params"], stats["grads"], stats["optim"], peak, peak_rss_bytes(),
         sorted(times)[len(times) // 2])


def _job(rank: int, world: int, emit, steps: int) -> None:
    """One rank's work (pycollect is already initialised by run_ranks)."""
    import torch

    from ..ddp import DistributedDataParallel
    from ..fsdp import ModuleWrapPolicy, fully_shard
    from .gpt import GPT, Block, GPTConfig

    cfg = GPTConfig(**DEMO_CONFIG)
    torch.manual_seed(0)
    model = fully_shard(GPT(cfg), policy=ModuleWrapPolicy({Block}))
    _train("FSDP", model, cfg, steps, rank, world, emit)
    torch.manual_seed(0)
    if rank == 0:
        emit("note", "DDP side: pycollect.ddp.DistributedDataParallel")
    _train("DDP", DistributedDataParallel(GPT(cfg)), cfg, steps, rank, world, emit)


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = width * done // total
    return "#" * filled + "." * (width - filled)


def _mib(n: int) -> str:
    return f"{n / 2**20:8.3f}"


def _print_table(rows) -> None:
    print(f"\n{'mode':<5} {'rank':>4} {'params MiB':>10} {'grads MiB':>10} {'optim MiB':>10} {'total MiB':>10} "
          f"{'gathered MiB':>12} {'peak RSS MiB':>12} {'step ms':>8}")
    for mode, rank, p, g, o, gathered, rss, step in sorted(rows, key=lambda r: (r[0] != "FSDP", r[1])):
        print(f"{mode:<5} {rank:>4} {_mib(p):>10} {_mib(g):>10} {_mib(o):>10} {_mib(p + g + o):>10} "
              f"{_mib(gathered):>12} {rss / 2**20:>12.1f} {step * 1e3:>8.1f}")
    print("gathered = peak bytes of unsharded parameters alive at once (FSDP only); "
          "peak RSS = resident high-water mark over the steps; step ms = median step time")


def main(world_size: int = 2, steps: int = 8) -> int:
    """Run the demo; returns 0 on success, 1 if a rank failed."""
    from .gpt import GPT, GPTConfig, num_params

    n = num_params(GPT(GPTConfig(**DEMO_CONFIG)))
    print(f"pycollect FSDP demo: GPT {DEMO_CONFIG} ({n:,} parameters), {world_size} ranks, "
          f"{steps} steps of {BATCH_PER_RANK} counting sequences per rank, Adam; FSDP units: each block + root")
    rows = []

    def on_event(rank: int, event: tuple) -> None:
        if event[0] == "loss":
            _, mode, step, total, loss = event
            print(f"[{mode:<4}] step {step + 1:>3}/{total} |{_bar(step + 1, total)}| loss {loss:.4f}", flush=True)
        elif event[0] == "note":
            print(event[1])
        elif event[0] == "mem":
            rows.append(event[1:])

    from ..launch import run_ranks

    try:
        run_ranks(_job, world_size, backends=("pycollect",), job_args=(steps,), timeout=300.0, on_event=on_event)
    except (RuntimeError, TimeoutError) as e:
        print(f"pycollect demo --fsdp failed: {e}")
        return 1
    _print_table(rows)
    fsdp = sum(r[2] + r[3] + r[4] for r in rows if r[0] == "FSDP") / world_size
    ddp = sum(r[2] + r[3] + r[4] for r in rows if r[0] == "DDP") / world_size
    print(f"model state per rank: FSDP {fsdp / 2**20:.3f} MiB vs DDP {ddp / 2**20:.3f} MiB "
          f"(x{ddp / fsdp:.2f}; world size {world_size})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
