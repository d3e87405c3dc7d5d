"""The flight recorder at work (docs/flight.md): 3 local ranks all-reduce in a loop, rank 2
stops itself (SIGSTOP) at call 200, ranks 0 and 1 time out after the group's timeout
and write their flight records; then `pycollect flight` reads them and names rank 2.
Rank 0 continues rank 2 afterwards, so every rank ends.

    .venv/bin/python bench/flight_example.py [--dir DIR] [--timeout 3]
"""
import argparse
import os
import signal
import sys
import tempfile
import time


def job(rank, world, emit, stop_at):
    import torch

    import pycollect as pc
    from pycollect import world

    world.store.set(f"pid/{rank}", str(os.getpid()))
    t = torch.ones(1 << 18)
    calls = 0
    try:
        while True:
            if rank == 2 and calls == stop_at:
                os.kill(os.getpid(), signal.SIGSTOP)
            pc.all_reduce(t)
            calls += 1
    except pc.PyCollectError as e:
        error = f"{type(e).__name__}: {e}"
    if rank == 0:
        time.sleep(0.5)  # rank 1 has written its record too
        os.kill(int(world.store.get("pid/2").decode()), signal.SIGCONT)
    return error


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="PYCOLLECT_FLIGHT_DIR (default: a new temp dir)")
    ap.add_argument("--timeout", type=float, default=3.0, help="the group's timeout, seconds")
    args = ap.parse_args()
    from pycollect import flight
    from pycollect.launch import run_ranks

    where = args.dir or tempfile.mkdtemp(prefix="pycollect-flight-example-")
    env = {"PYCOLLECT_FLIGHT_DIR": where}
    # Gloo beside it: run_ranks ends with a barrier, which the failed pycollect group cannot give.
    errors = run_ranks(job, 3, ["pycollect", "gloo"], job_args=(200,), timeout=120, env=env, group_timeout=args.timeout)
    for rank, error in enumerate(errors):
        print(f"rank {rank}: {error}\n")
    print(f"$ pycollect flight {where}")
    print("\n".join(flight.report(where)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
