"""pycollect.memory: how much memory per GPU a model needs under DDP, ZeRO-1/2/3, FSDP and
hybrid sharding, and how many GPUs it takes. Pure Python: it needs neither torch nor the
compiled engine.

    from pycollect.memory import memory_calculator, gpus_needed
    memory_calculator(params_billions=70, num_gpus=8, sharding="fsdp")["per_gpu_total_gb"]   # 140.0

Files: planner.py (the public calls) -> states.py (model states by stage), activations.py
(Korthikanti et al.), comm.py (volume and time per step), deepspeed.py (DeepSpeed's estimators).
"""
from .planner import (GB, RECOMPUTE_MODES, STAGES, CommEstimate, DeepSpeedEstimate, MemoryEstimate, ModelShape,
                      __all__, communication_volume, deepspeed_zero2_estimate, deepspeed_zero3_estimate,
                      estimate_memory, gpus_needed, memory_calculator, parse_params)
