"""`pycollect demo --fsdp`: train a small GPT on local ranks with FSDP, then with DDP,
and show what each rank holds.

    from pycollect import fsdp_demo
    fsdp_demo.main(world_size=2, steps=8)

Each rank is a process on loopback (multiprocessing spawn, a free port). The ranks send
their losses and memory figures to this process, which prints a progress line per step
and, at the end, one table row per rank and mode: parameter, gradient and optimizer
bytes, the peak of gathered (unsharded) parameter bytes, and the peak resident memory
measured over the training steps.
"""
from __future__ import annotations

import importlib.util
import multiprocessing as mp
import socket
import time
import traceback

DEMO_CONFIG = dict(vocab=256, seq=32, dim=64, layers=4, heads=4, tied=True)
BATCH_PER_RANK = 4


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_replicate(model):
    """(model, sync, label) for the DDP side: pycollect.ddp when it exists, else plain
    replication whose sync() averages every gradient with pycollect's ring all-reduce."""
    import pycollect as pc

    if importlib.util.find_spec("pycollect.ddp") is not None:
        try:
            from pycollect.ddp import DistributedDataParallel

            return DistributedDataParallel(model), lambda: None, "pycollect.ddp.DistributedDataParallel"
        except (ImportError, TypeError):
            pass

    def sync():
        works = [pc.all_reduce(p.grad, op=pc.ReduceOp.AVG, async_op=True)
                 for p in model.parameters() if p.grad is not None]
        for w in works:
            w.wait()

    return model, sync, "replicas + pycollect.all_reduce of each gradient"


def _train(mode, model, sync, cfg, steps, rank, world, queue):
    import torch

    from pycollect.fsdp import memory_stats, model_state_bytes, peak_rss_bytes, reset_peak_rss
    from pycollect.fsdp.toy_models import counting_batch, lm_loss
    import pycollect as pc

    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    reset_peak_rss()
    times = []
    for step in range(steps):
        start = time.perf_counter()
        tokens, targets = counting_batch(cfg, BATCH_PER_RANK * world, seed=step)
        rows = slice(rank * BATCH_PER_RANK, (rank + 1) * BATCH_PER_RANK)
        loss = lm_loss(model(tokens[rows]), targets[rows])
        opt.zero_grad()
        loss.backward()
        sync()
        opt.step()
        times.append(time.perf_counter() - start)
        mean = loss.detach().reshape(1).clone()
        pc.all_reduce(mean, op=pc.ReduceOp.AVG)
        if rank == 0:
            queue.put(("loss", mode, step, steps, mean.item()))
    stats = memory_stats(model, opt) if mode == "FSDP" else model_state_bytes(model, opt)
    peak = max(stats.get("peak_unsharded_bytes", {"-": 0}).values() or [0])
    queue.put(("mem", mode, rank, stats["params"], stats["grads"], stats["optim"], peak, peak_rss_bytes(),
               sorted(times)[len(times) // 2]))


def _rank(rank: int, world: int, port: int, steps: int, queue) -> None:
    try:
        import torch

        import pycollect as pc
        from pycollect.fsdp import ModuleWrapPolicy, fully_shard
        from pycollect.fsdp.toy_models import GPT, Block, GPTConfig

        torch.set_num_threads(1)
        pc.init_process_group(init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        cfg = GPTConfig(**DEMO_CONFIG)
        torch.manual_seed(0)
        model = fully_shard(GPT(cfg), policy=ModuleWrapPolicy({Block}))
        _train("FSDP", model, lambda: None, cfg, steps, rank, world, queue)
        torch.manual_seed(0)
        model, sync, label = ddp_replicate(GPT(cfg))
        if rank == 0:
            queue.put(("note", f"DDP side: {label}"))
        _train("DDP", model, sync, cfg, steps, rank, world, queue)
        pc.destroy_process_group()
        queue.put(("done", rank))
    except BaseException:  # noqa: BLE001 - shown by the parent
        queue.put(("error", rank, traceback.format_exc()))


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
    from pycollect.fsdp.toy_models import GPT, GPTConfig, num_params

    n = num_params(GPT(GPTConfig(**DEMO_CONFIG)))
    print(f"pycollect FSDP demo: GPT {DEMO_CONFIG} ({n:,} parameters), {world_size} ranks, "
          f"{steps} steps of {BATCH_PER_RANK} counting sequences per rank, Adam; FSDP units: each block + root")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, world_size, port, steps, queue), daemon=True)
             for r in range(world_size)]
    for p in procs:
        p.start()
    rows, done, failed = [], 0, False
    while done < world_size and not failed:
        try:
            msg = queue.get(timeout=120)
        except Exception:
            print("no message from the ranks for 120 s; giving up")
            failed = True
            break
        if msg[0] == "loss":
            _, mode, step, total, loss = msg
            print(f"[{mode:<4}] step {step + 1:>3}/{total} |{_bar(step + 1, total)}| loss {loss:.4f}", flush=True)
        elif msg[0] == "note":
            print(msg[1])
        elif msg[0] == "mem":
            rows.append(msg[1:])
        elif msg[0] == "done":
            done += 1
        else:
            print(f"rank {msg[1]} failed:\n{msg[2]}")
            failed = True
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    if failed:
        return 1
    _print_table(rows)
    fsdp = sum(r[2] + r[3] + r[4] for r in rows if r[0] == "FSDP") / world_size
    ddp = sum(r[2] + r[3] + r[4] for r in rows if r[0] == "DDP") / world_size
    print(f"model state per rank: FSDP {fsdp / 2**20:.3f} MiB vs DDP {ddp / 2**20:.3f} MiB "
          f"(x{ddp / fsdp:.2f}; world size {world_size})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
