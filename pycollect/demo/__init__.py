"""The lesson's jobs on pycollect's engine.

    from pycollect import demo
    r = demo.run_distributed_demo(world_size=2)      # the lesson's API (lesson.py)
    r["param_sum_spread"], r["fsdp_round_trip_all_ranks_ok"]

Files: lesson.py (the lesson's data-parallel drills and helpers), ddp_job.py (`pycollect
demo`: pycollect DDP against torch DDP on Gloo), fsdp_job.py (`pycollect demo --fsdp`:
FSDP against DDP, memory per rank), paradigms.py (`pycollect demo --paradigm`: dp, tp, pp,
fsdp, hsdp side by side), tp_gpt.py (the GPT in tensor-parallel form), models.py (the demo's models and data), gpt.py (the
small GPT that the FSDP demo, the tests and the benchmarks train).

The lesson's names are loaded on first use, so `pycollect demo --help` (and every other
subcommand) starts without importing torch.
"""
from __future__ import annotations

MODELS = ("mlp", "cnn", "gpt-tiny")
PARADIGMS = ("dp", "tp", "pp", "fsdp", "hsdp")  # pycollect demo --paradigm (paradigms.py)
ROWS_PER_RANK = {"mlp": 32, "cnn": 16, "gpt-tiny": 8}

_LESSON = ("run_distributed_demo", "fsdp_round_trip_sketch", "broadcast_module", "all_reduce_grads_",
           "shard_for_rank", "make_model", "manual_all_reduce_matches_single_process")
__all__ = ["MODELS", "PARADIGMS", "ROWS_PER_RANK", *_LESSON]


def __getattr__(name):
    if name in _LESSON:
        from . import lesson

        return getattr(lesson, name)
    raise AttributeError(f"module 'pycollect.demo' has no attribute {name!r}")
