"""Memory and communication planner for data-parallel training (DDP, ZeRO, FSDP).

The lesson's calculator, with the numbers made exact::

    >>> from pycollect.memory import memory_calculator
    >>> r = memory_calculator(params_billions=70, num_gpus=8, sharding="fsdp")
    >>> r["per_gpu_total_gb"], r["fits_on_80gb"]
    (140.0, False)

Units: GB are decimal, 1 GB = 1e9 bytes (the ZeRO paper's 120 GB for 7.5 B parameters
is 7.5e9 x 16 bytes).  Results are per GPU unless a name says otherwise.

Two accountings of mixed-precision Adam (Ψ parameters):

* ``master_weights=True`` (default), the ZeRO paper's: 2Ψ 16-bit params + 2Ψ 16-bit grads
  + 12Ψ optimizer state (fp32 master copy, momentum, variance) = 16 bytes per parameter.
  70 B on 8 GPUs under FSDP: 140 GB per GPU.
* ``master_weights=False``, the lesson's "≈105 GB per GPU": 16-bit weights and grads plus
  the two fp32 Adam moments, no fp32 master copy = 12 bytes per parameter, 105 GB.

Either way 70 B does not fit on 8 x 80 GB before a single activation is stored.

What is counted, per GPU (see the modules beside this one for the formulas and their sources):

* model states by stage: ``ddp``/``none``, ``zero1``, ``zero2``, ``zero3``/``fsdp``,
  ``hybrid`` (zero3 inside a node, replicated across nodes) (:mod:`.states`);
* activations from the model's shape, Korthikanti et al. 2022, with tensor and sequence
  parallelism and selective or full recomputation (:mod:`.activations`);
* CPU offload of the optimizer state, and of parameters and gradients under zero3;
* FSDP working buffers: the largest unit's gathered 16-bit parameters, twice when the
  next unit is prefetched;
* communication volume per step and its time at a given bus bandwidth
  (:mod:`.comm`);
* DeepSpeed's own estimators, reproduced exactly (:mod:`.deepspeed`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from .activations import RECOMPUTE_MODES, ModelShape, activation_bytes
from .comm import CommEstimate, comm_bytes, comm_time, comm_time_model
from .deepspeed import DeepSpeedEstimate, deepspeed_zero2_estimate, deepspeed_zero3_estimate
from .states import (PARAM_SHARDED_STAGES, STAGES, bytes_per_param, canonical_precision,
                             canonical_stage, element_bytes, layout, model_state_bytes)

__all__ = [
    "GB", "STAGES", "RECOMPUTE_MODES", "ModelShape", "MemoryEstimate", "CommEstimate",
    "DeepSpeedEstimate", "memory_calculator", "estimate_memory", "gpus_needed",
    "communication_volume", "parse_params", "deepspeed_zero2_estimate",
    "deepspeed_zero3_estimate",
]

GB = 1e9  # decimal gigabyte, as in the ZeRO paper and nccl-tests

# Give up looking for a GPU count beyond this many (the answer is then "none fits").
_MAX_GPUS = 1 << 24

# Relative slack when comparing a total with a capacity, so that 16 x 70 / 14 "= 80.000...01"
# still fits in 80 GB.
_FIT_SLACK = 1e-12

# A bare number this large was surely meant as a raw count, not billions: refuse it.
_BARE_LIMIT = 1e6

_SUFFIXES = {"": 1.0, "k": 1e-6, "m": 1e-3, "b": 1.0, "g": 1.0, "t": 1e3}


def parse_params(text: str | float | int) -> float:
    """Parse a parameter count into billions: "70B" -> 70, "350M" -> 0.35, "1.2T" -> 1200.

    A bare number is already in billions ("7.5" -> 7.5).  Suffixes K, M, B (or G), T.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return _positive("params_billions", text)
    match = re.fullmatch(r"\s*([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*",
                         str(text))
    if not match:
        raise ValueError(f"cannot read a parameter count from {text!r}; "
                         "write e.g. 70B, 7.5B, 350M or 1.2T")
    number, suffix = float(match.group(1)), match.group(2).lower()
    if not suffix and number >= _BARE_LIMIT:
        raise ValueError(f"a bare number is in billions, and {text!r} billion parameters is "
                         "not a model; add a suffix, e.g. 262.1M or 70B")
    return _positive("params", number * _SUFFIXES[suffix])


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def _fits(need_gb: float, have_gb: float) -> bool:
    return need_gb <= have_gb * (1 + _FIT_SLACK)


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-GPU memory for one training configuration, in bytes (``*_gb`` in GB)."""

    params_billions: float
    num_gpus: int
    sharding: str  # as the caller spelled it
    stage: str  # canonical: one of STAGES
    precision: str
    optimizer: str
    master_weights: bool
    tensor_parallel: int
    shard_degree: int  # ranks each sharded state is divided over
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    buffers_bytes: float  # FSDP gathered-unit buffers (zero3 / hybrid)
    cpu_bytes: float  # offloaded to host memory, per GPU
    comm: CommEstimate
    gpu_memory_gb: float = 80.0
    notes: tuple[str, ...] = field(default=())
    pipeline_parallel: int = 1

    @property
    def per_gpu_bytes(self) -> float:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes + self.buffers_bytes)

    @property
    def per_gpu_gb(self) -> float:
        return self.per_gpu_bytes / GB

    @property
    def fits(self) -> bool:
        """Whether the per-GPU total fits in ``gpu_memory_gb``."""
        return _fits(self.per_gpu_gb, self.gpu_memory_gb)

    def as_dict(self) -> dict[str, Any]:
        """The lesson's result keys, then the extras this planner adds."""
        return {
            "params_billions": self.params_billions,
            "weights_gb": self.weights_bytes / GB,
            "optimizer_gb": self.optimizer_bytes / GB,
            "gradients_gb": self.gradients_bytes / GB,
            "activations_gb": self.activations_bytes / GB,
            "per_gpu_total_gb": self.per_gpu_gb,
            "total_across_gpus_gb": self.per_gpu_gb * self.num_gpus,
            "fits_on_80gb": _fits(self.per_gpu_gb, 80.0),
            "num_gpus": self.num_gpus,
            "sharding": self.sharding,
            # extras
            "stage": self.stage,
            "precision": self.precision,
            "optimizer": self.optimizer,
            "master_weights": self.master_weights,
            "bytes_per_param": bytes_per_param(self.precision, self.optimizer,
                                               self.master_weights).total,
            "tensor_parallel": self.tensor_parallel,
            "pipeline_parallel": self.pipeline_parallel,
            "shard_degree": self.shard_degree,
            "buffers_gb": self.buffers_bytes / GB,
            "cpu_offload_gb": self.cpu_bytes / GB,
            "gpu_memory_gb": self.gpu_memory_gb,
            "fits": self.fits,
            "comm_gb_per_step": self.comm.gb_per_rank,
            "comm_time_s": self.comm.time_s,
            "notes": list(self.notes),
        }


def estimate_memory(params_billions: float, num_gpus: int = 1, sharding: str = "none", *,
                    precision: str = "mixed", optimizer: str = "adam",
                    master_weights: bool = True, model: Optional[ModelShape] = None,
                    recompute: str = "none", tensor_parallel: int = 1, pipeline_parallel: int = 1,
                    sequence_parallel: bool = False, offload_optimizer: bool = False,
                    offload_params: bool = False, largest_unit_billions: Optional[float] = None,
                    prefetch: bool = True, gpus_per_node: int = 8, gpu_memory_gb: float = 80.0,
                    bus_bandwidth_gbs: Optional[float] = None,
                    inter_node_bandwidth_gbs: Optional[float] = None,
                    comm_model=None) -> MemoryEstimate:
    """Per-GPU memory and per-step communication of one training configuration.

    Args:
        params_billions: model size Ψ in billions of parameters.
        num_gpus: GPUs in the job (tensor-parallel x data-parallel).
        sharding: "none"/"ddp", "zero1", "zero2", "zero3"/"fsdp", "hybrid"/"hsdp".
        precision: "mixed" (16-bit params/grads, fp32 optimizer state) or "fp32".
        optimizer: "adam"/"adamw" (2 fp32 states), "sgd_momentum" (1), "sgd" (0).
        master_weights: keep an fp32 master copy under mixed precision (16 bytes per
            parameter with Adam, the ZeRO paper); False gives the lesson's 12.
        model: the transformer's shape; without it activations count as 0.
        recompute: "none", "selective" or "full" activation recomputation.
        tensor_parallel, sequence_parallel: Megatron-style degree t; model states and
            activations are divided by t, data parallelism spans num_gpus / (t x p).
        pipeline_parallel: stages p; model states are divided by p. Activations are
            not: under 1F1B the first stage holds p micro-batches of L/p layers, one
            micro-batch's worth of the whole model (Narayanan et al. 2021).
        offload_optimizer: optimizer state lives in CPU memory.
        offload_params: parameters, gradients and optimizer state live in CPU memory
            (zero3/hybrid only; implies offload_optimizer, as in FSDP and DeepSpeed).
        largest_unit_billions: parameters of the largest FSDP unit; defaults to one
            transformer layer of ``model``.  Under zero3/hybrid its 16-bit parameters are
            gathered whole, twice when ``prefetch`` overlaps the next unit's gather.
        gpus_per_node: node size, for hybrid sharding.
        gpu_memory_gb: capacity that ``fits`` is checked against.
        bus_bandwidth_gbs: nccl-tests bus bandwidth (GB/s), e.g. from pycollect's
            benchmark, for the communication time; ``inter_node_bandwidth_gbs`` for the
            cross-node part of hybrid sharding.  A typed bandwidth wins over
            ``comm_model``.
        comm_model: pycollect.costmodel.Params; without a bandwidth, the communication
            time is the cost model's (each collective by its fastest algorithm).

    Raises:
        ValueError: on nonsense input (non-positive sizes, zero GPUs, unknown stage,
            a GPU count that the tensor-parallel degree or node size does not divide).
    """
    params_billions = _positive("params_billions", params_billions)
    num_gpus = _count("num_gpus", num_gpus)
    tensor_parallel = _count("tensor_parallel", tensor_parallel)
    pipeline_parallel = _count("pipeline_parallel", pipeline_parallel)
    gpus_per_node = _count("gpus_per_node", gpus_per_node)
    gpu_memory_gb = _positive("gpu_memory_gb", gpu_memory_gb)
    for name, bw in (("bus_bandwidth_gbs", bus_bandwidth_gbs),
                     ("inter_node_bandwidth_gbs", inter_node_bandwidth_gbs)):
        if bw is not None:
            _positive(name, bw)
    if model is not None and not isinstance(model, ModelShape):
        raise ValueError(f"model must be a ModelShape, got {type(model).__name__}")
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"unknown recompute mode {recompute!r}; choose one of: "
                         f"{', '.join(RECOMPUTE_MODES)}")
    stage = canonical_stage(sharding)
    precision = canonical_precision(precision)
    optimizer = optimizer.strip().lower() if isinstance(optimizer, str) else optimizer
    per_param = bytes_per_param(precision, optimizer, master_weights)
    if offload_params and stage not in PARAM_SHARDED_STAGES:
        raise ValueError(f"offload_params needs sharded parameters (zero3, fsdp or hybrid), "
                         f"not {sharding!r}")
    lay = layout(stage, num_gpus, tensor_parallel, gpus_per_node, pipeline_parallel)
    params = params_billions * 1e9
    notes: list[str] = []

    states = model_state_bytes(params, stage, per_param, lay, offload_optimizer, offload_params)

    elem = element_bytes(precision)
    if model is None:
        acts = 0.0
        notes.append("activations not counted: no model shape given")
    else:
        acts = activation_bytes(model, recompute, tensor_parallel, sequence_parallel, elem)

    buffers = 0.0
    if stage in PARAM_SHARDED_STAGES:
        if largest_unit_billions is not None:
            unit = _positive("largest_unit_billions", largest_unit_billions) * 1e9
            if unit > params:
                raise ValueError(f"largest_unit_billions={largest_unit_billions} exceeds "
                                 f"params_billions={params_billions}")
        elif model is not None:
            unit = float(model.layer_params)
        else:
            unit = 0.0
            notes.append("FSDP unit buffers not counted: give largest_unit_billions or a model")
        buffers = unit / tensor_parallel * per_param.params * (2 if prefetch else 1)

    group, inter = comm_bytes(params, stage, lay, elem)
    seconds = comm_time(group, inter, bus_bandwidth_gbs, inter_node_bandwidth_gbs)
    if seconds is None and comm_model is not None:
        seconds = comm_time_model(params, stage, lay, elem, comm_model)
    comm = CommEstimate(stage, group, inter, seconds)

    return MemoryEstimate(
        params_billions=params_billions, num_gpus=num_gpus, sharding=str(sharding).strip().lower(),
        stage=stage, precision=precision, optimizer=optimizer, master_weights=bool(master_weights),
        tensor_parallel=tensor_parallel, pipeline_parallel=pipeline_parallel, shard_degree=lay.shard_degree,
        weights_bytes=states.weights, gradients_bytes=states.gradients,
        optimizer_bytes=states.optimizer, activations_bytes=acts, buffers_bytes=buffers,
        cpu_bytes=states.cpu, comm=comm, gpu_memory_gb=gpu_memory_gb, notes=tuple(notes))


def memory_calculator(params_billions: float, num_gpus: int = 1, sharding: str = "none", *,
                      num_layers: Optional[int] = None, hidden_size: Optional[int] = None,
                      num_heads: Optional[int] = None, seq_len: Optional[int] = None,
                      micro_batch: int = 1, **options: Any) -> dict[str, Any]:
    """The lesson's calculator: ``memory_calculator(params_billions=70, num_gpus=8,
    sharding="fsdp")["per_gpu_total_gb"]``.

    Returns a dict with the lesson's keys (``params_billions``, ``weights_gb``,
    ``optimizer_gb``, ``gradients_gb``, ``activations_gb``, ``per_gpu_total_gb``,
    ``total_across_gpus_gb``, ``fits_on_80gb``, ``num_gpus``, ``sharding``) plus extras
    (see :meth:`MemoryEstimate.as_dict`).  Values are unrounded decimal GB.

    The default accounting is mixed-precision Adam with an fp32 master copy, 16 bytes per
    parameter (70 B / 8 GPUs / fsdp: 140 GB per GPU); ``master_weights=False`` gives the
    lesson's 12 bytes per parameter (105 GB).  Neither fits on 80 GB.

    The model's shape may be given flat (``num_layers``, ``hidden_size``, ``num_heads``,
    ``seq_len``, ``micro_batch``) for activations; all four of the first must be given
    together.  Other keyword options are those of :func:`estimate_memory`.
    """
    shape_args = (num_layers, hidden_size, num_heads, seq_len)
    if any(a is not None for a in shape_args):
        if any(a is None for a in shape_args):
            raise ValueError("give num_layers, hidden_size, num_heads and seq_len together "
                             "to count activations")
        options["model"] = ModelShape(num_layers, hidden_size, num_heads, seq_len, micro_batch)
    return estimate_memory(params_billions, num_gpus, sharding, **options).as_dict()


def gpus_needed(params_billions: float, gpu_memory_gb: float = 80.0, sharding: str = "fsdp",
                **options: Any) -> Optional[int]:
    """The fewest GPUs on which the per-GPU total fits in ``gpu_memory_gb``.

    ``options`` are those of :func:`estimate_memory` (not ``num_gpus``).  Returns None
    when no count fits: DDP never gets smaller with more GPUs, zero1/zero2 keep their
    unsharded 16-bit parameters (and grads), hybrid is capped at one node's sharding.
    Counts are multiples of ``tensor_parallel x pipeline_parallel``; for hybrid, at most one node (beyond
    that the per-GPU memory no longer falls).
    """
    if "num_gpus" in options:
        raise ValueError("gpus_needed chooses num_gpus itself; do not pass it")
    gpu_memory_gb = _positive("gpu_memory_gb", gpu_memory_gb)
    step = (_count("tensor_parallel", options.get("tensor_parallel", 1))
            * _count("pipeline_parallel", options.get("pipeline_parallel", 1)))
    stage = canonical_stage(sharding)

    def fits(k: int) -> bool:
        est = estimate_memory(params_billions, k * step, sharding,
                              gpu_memory_gb=gpu_memory_gb, **options)
        return est.fits

    limit = _MAX_GPUS // step
    if stage == "hybrid":
        # Up to one node hybrid is zero3 over the GPUs present; past it, nothing changes.
        limit = max(1, _count("gpus_per_node", options.get("gpus_per_node", 8)) // step)
    # Memory per GPU never grows with more GPUs, so double until it fits, then bisect.
    hi = 1
    while not fits(hi):
        if hi >= limit:
            return None
        hi = min(hi * 2, limit)
    lo = hi // 2  # lo does not fit (or is 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi * step


def communication_volume(params_billions: float, num_gpus: int, sharding: str = "fsdp", *,
                         precision: str = "mixed", tensor_parallel: int = 1,
                         gpus_per_node: int = 8, bus_bandwidth_gbs: Optional[float] = None,
                         inter_node_bandwidth_gbs: Optional[float] = None) -> CommEstimate:
    """Bytes each rank moves per step: DDP/zero1/zero2 2Ψ(n-1)/n, zero3 3Ψ(n-1)/n, times
    2 bytes per element (4 for fp32); with the time at ``bus_bandwidth_gbs`` (GB/s,
    nccl-tests busbw) when given."""
    return estimate_memory(params_billions, num_gpus, sharding, precision=precision,
                           tensor_parallel=tensor_parallel, gpus_per_node=gpus_per_node,
                           bus_bandwidth_gbs=bus_bandwidth_gbs,
                           inter_node_bandwidth_gbs=inter_node_bandwidth_gbs).comm
