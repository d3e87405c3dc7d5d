"""`pycollect demo --paradigm dp|tp|pp|fsdp|hsdp|all`: the lesson's four paradigms (and
hybrid sharding) training the same small GPT on the same data, side by side.

Every paradigm sees the same global batch per step (counting sequences, so the loss
visibly falls) and starts from the same weights; what differs is who holds what and what
travels. Per paradigm the table shows the last loss, the model-state bytes per rank
(parameters, gradients and Adam's state, counted from the tensors) beside the memory
planner's prediction for the same layout, the bytes each rank put on the wire per step
(counted by the engine), and the median step time of the slowest rank.

    dp    pycollect DDP: full replicas, gradients all-reduced; each rank its rows
    tp    tensor parallel over all ranks: heads, MLP units and vocabulary split; same rows
    pp    pipeline (pycollect.pp): one stage per rank, 1F1B over 4 micro-batches of the batch
    fsdp  ZeRO-3 over all ranks: one unit per block; each rank its rows
    hsdp  FSDP inside pairs of ranks, replicated across the pairs (2 x W/2 grid)
"""
from __future__ import annotations

import statistics
import sys
import time
from typing import Dict, List

from . import PARADIGMS

CONFIG = dict(vocab=64, seq=32, dim=64, layers=4, heads=4, tied=False)
GLOBAL_ROWS = 8       # sequences per step, whatever the paradigm
MICRO_BATCHES = 4     # pipeline
LR = 1e-2


def _build(paradigm: str, cfg, world: int):
    """(model, rows of the global batch this rank trains on, engine groups it uses, planner options)."""
    import torch

    from .. import api
    from ..ddp import DistributedDataParallel
    from ..fsdp import ModuleWrapPolicy, fully_shard
    from ..mesh import grid_groups
    from .gpt import GPT, Block
    from .tp_gpt import tensor_parallel_gpt

    rank, per = api.get_rank(), GLOBAL_ROWS // world
    mine = slice(rank * per, (rank + 1) * per)
    torch.manual_seed(0)
    model = GPT(cfg)
    if paradigm == "dp":
        return DistributedDataParallel(model), mine, [None], dict(sharding="ddp")
    if paradigm == "tp":
        return tensor_parallel_gpt(model), slice(None), [None], dict(sharding="ddp", tensor_parallel=world)
    if paradigm == "fsdp":
        return fully_shard(model, policy=ModuleWrapPolicy({Block})), mine, [None], dict(sharding="zero3")
    if paradigm == "hsdp":
        inner = 2 if world % 2 == 0 else world
        shard, replicate = grid_groups(inner)
        model = fully_shard(model, group=shard, replicate_group=replicate, policy=ModuleWrapPolicy({Block}))
        return model, mine, [shard, replicate], dict(sharding="hybrid", gpus_per_node=inner)
    raise ValueError(f"unknown paradigm {paradigm!r}; choose one of {', '.join(PARADIGMS)}")


def _job(rank: int, world: int, emit, paradigm: str, steps: int) -> Dict:
    """One paradigm on one rank; emits ("step", paradigm, step, loss, seconds) per step."""
    import torch

    from .. import api
    from ..fsdp import model_state_bytes
    from .gpt import GPTConfig, counting_batch, lm_loss

    cfg = GPTConfig(**CONFIG)
    if paradigm == "pp":
        return _pipeline_job(rank, world, emit, cfg, steps)
    model, rows, groups, planner = _build(paradigm, cfg, world)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    sent_before = sum(api.get_bytes_sent(g) for g in groups)
    for step in range(steps):
        tokens, targets = counting_batch(cfg, GLOBAL_ROWS, seed=step)
        api.barrier()
        t0 = time.perf_counter()
        loss = lm_loss(model(tokens[rows]), targets[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        seconds = time.perf_counter() - t0
        mean = loss.detach().reshape(1).double()
        if paradigm != "tp":  # the others saw a share of the rows: average the shares
            api.all_reduce(mean, op=api.ReduceOp.AVG)
        emit("step", paradigm, step, float(mean), seconds)
    sent = sum(api.get_bytes_sent(g) for g in groups) - sent_before
    return {"state": model_state_bytes(model, opt)["total"], "sent_per_step": sent / steps,
            "planner": planner, "params": _full_params(cfg)}


def _full_params(cfg) -> int:
    """Parameters of the whole (unsplit) model, for the planner."""
    import torch

    from .gpt import GPT, num_params

    with torch.device("meta"):
        return num_params(GPT(cfg))


def _pipeline_job(rank: int, world: int, emit, cfg, steps: int) -> Dict:
    """One stage per rank, 1F1B over MICRO_BATCHES micro-batches of the whole batch."""
    import torch

    from .. import api
    from ..pp import gpt_pieces, train_steps
    from .gpt import GPT, counting_batch, lm_loss

    torch.manual_seed(0)
    batches = [counting_batch(cfg, GLOBAL_ROWS, seed=step) for step in range(steps)]
    sent_before = api.get_bytes_sent()
    out = train_steps(gpt_pieces(GPT(cfg)), batches, lm_loss, micro_batches=MICRO_BATCHES, schedule="1f1b",
                      lr=LR)
    sent = api.get_bytes_sent() - sent_before
    for step, (loss, seconds) in enumerate(zip(out["losses"], out["step_times"])):
        emit("step", "pp", step, loss, seconds)
    return {"state": out["state_bytes"], "sent_per_step": sent / steps, "params": _full_params(cfg),
            "planner": dict(sharding="ddp", pipeline_parallel=world), "bubble": out["bubble"].mean_measured,
            "textbook": out["bubble"].textbook}


def _predicted_state_bytes(planner: dict, params: int, world: int) -> float:
    from ..memory import estimate_memory

    est = estimate_memory(params / 1e9, world, precision="fp32", **planner)
    return est.weights_bytes + est.gradients_bytes + est.optimizer_bytes


class _Collector:
    """Joins every rank's step events into one progress line per step (slowest rank's time)."""

    def __init__(self, world: int, steps: int):
        self.world, self.steps = world, steps
        self.pending: Dict[tuple, List] = {}
        self.losses: Dict[str, List[float]] = {}
        self.times: Dict[str, List[float]] = {}

    def __call__(self, rank: int, event: tuple) -> None:
        _, paradigm, step, loss, seconds = event
        got = self.pending.setdefault((paradigm, step), [])
        got.append((loss, seconds))
        if len(got) < self.world:
            return
        del self.pending[(paradigm, step)]
        loss, seconds = got[0][0], max(s for _, s in got)
        self.losses.setdefault(paradigm, []).append(loss)
        self.times.setdefault(paradigm, []).append(seconds)
        print(f"  [{paradigm:<4}] step {step + 1:>3}/{self.steps}  loss {loss:.4f}  {seconds * 1e3:7.1f} ms",
              flush=True)


def main(paradigms=PARADIGMS, world_size: int = 2, steps: int = 6, timeout: float = 300.0) -> int:
    """Train each paradigm in fresh ranks and print the comparison table; 0 on success."""
    from ..launch import run_ranks

    unknown = [p for p in paradigms if p not in PARADIGMS]
    if unknown or world_size < 2 or steps < 1 or GLOBAL_ROWS % world_size:
        print(f"pycollect demo --paradigm: need paradigms from {PARADIGMS} (got {unknown or 'ok'}), "
              f"--world-size >= 2 dividing {GLOBAL_ROWS}, --steps >= 1", file=sys.stderr)
        return 2
    print(f"pycollect demo --paradigm: GPT {CONFIG}, {world_size} ranks on 127.0.0.1, {steps} Adam steps of "
          f"{GLOBAL_ROWS} sequences", flush=True)
    collector, rows, bubbles = _Collector(world_size, steps), [], []
    for paradigm in paradigms:
        try:
            results = run_ranks(_job, world_size, ("pycollect",), job_args=(paradigm, steps), timeout=timeout,
                                on_event=collector)
        except (RuntimeError, TimeoutError) as e:
            print(f"pycollect demo --paradigm {paradigm} failed: {e}", file=sys.stderr)
            return 1
        first = results[0]
        if "bubble" in first:
            bubbles.append((paradigm, first))
        rows.append((paradigm, collector.losses[paradigm][-1], max(r["state"] for r in results),
                     _predicted_state_bytes(first["planner"], first["params"], world_size),
                     statistics.mean(r["sent_per_step"] for r in results),
                     statistics.median(collector.times[paradigm])))
    print(f"\n  {'paradigm':<9}{'last loss':>10}{'state KiB/rank':>16}{'planner KiB':>13}"
          f"{'sent KiB/step/rank':>20}{'median step ms':>16}")
    for name, loss, state, predicted, sent, step in rows:
        print(f"  {name:<9}{loss:>10.4f}{state / 1024:>16.1f}{predicted / 1024:>13.1f}{sent / 1024:>20.1f}"
              f"{step * 1e3:>16.1f}")
    print("  state = parameters + gradients + Adam state (fp32), largest over ranks; planner = "
          "pycollect.memory.estimate_memory for the same layout; sent = counted by the engine")
    for paradigm, result in bubbles:
        print(f"  pp bubble: measured {result['bubble']:.2f} of each stage's step idle, textbook "
              f"(p-1)/(m+p-1) = {result['textbook']:.2f} for p={world_size}, m={MICRO_BATCHES}")
    if "hsdp" in paradigms and world_size < 4:
        print(f"  (hsdp on {world_size} ranks has a single replica; --world-size 4 gives a 2 x 2 grid)")
    return 0
