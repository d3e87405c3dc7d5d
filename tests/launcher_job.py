"""An mpirun script (tests/test_launchers.py): with only MASTER_PORT exported,

    mpirun -np 2 -x MASTER_PORT=P -x PORT_TORCH=Q -x PORT_GLOO=R python tests/launcher_job.py

(a) pc.init_process_group() with no arguments, and one all-reduce checked against its sum;
(b) pycollect.export_torch_env(), then one DDP step of a tiny nn.Linear on torch's backend
    "pycollect" and the same step on "gloo", from the same seeds: the parameters must be
    bit-identical. Each phase meets on its own port, so that no rank reaches a store that
    the previous phase is closing.

Prints one JSON line per rank.
"""
import hashlib
import json
import os
import time

import torch
import torch.distributed as dist

import pycollect as pc


def pycollect_all_reduce() -> dict:
    pc.init_process_group()
    rank, world = pc.get_rank(), pc.get_world_size()
    t = torch.full((1000,), float(rank + 1))
    pc.all_reduce(t)
    pc.barrier()
    pc.destroy_process_group()
    return {"rank": rank, "world": world, "all_reduce_ok": bool((t == world * (world + 1) / 2).all())}


def ddp_step(backend: str) -> torch.Tensor:
    dist.init_process_group(backend)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
    x, y = torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)
    loss = ((ddp(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    dist.barrier()
    dist.destroy_process_group()
    return flat


if __name__ == "__main__":
    torch.set_num_threads(1)
    out = pycollect_all_reduce()
    os.environ["MASTER_PORT"] = os.environ["PORT_TORCH"]
    env = pc.export_torch_env()
    out.update(launcher=env.launcher, notes=list(env.notes),
               torch_env={k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                         "MASTER_ADDR", "MASTER_PORT")})
    on_pycollect = ddp_step("pycollect")
    os.environ["MASTER_PORT"] = os.environ["PORT_GLOO"]
    on_gloo = ddp_step("gloo")
    out.update(identical=torch.equal(on_pycollect, on_gloo),
               digest=hashlib.sha1(on_pycollect.numpy().tobytes()).hexdigest())
    print("LAUNCHER_JOB " + json.dumps(out), flush=True)
    # Rank 0 hosts the last phase's store and holds Gloo's pairs: it leaves once every rank
    # is done with them (DONE_DIR, a directory the test made). A loaded CI run once saw rank
    # 1 never get this far after rank 0 had printed and gone.
    done = os.environ.get("DONE_DIR")
    if done:
        open(os.path.join(done, f"done.{out['rank']}"), "w").close()
        deadline = time.monotonic() + 60
        while out["rank"] == 0 and time.monotonic() < deadline and not all(
                os.path.exists(os.path.join(done, f"done.{r}")) for r in range(out["world"])):
            time.sleep(0.05)
