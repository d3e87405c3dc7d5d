"""Communication volume per training step, per rank, for each sharding stage.

A ring collective over n ranks moves (n-1)/n of its buffer through every rank for an
all-gather or a reduce-scatter, and twice that for an all-reduce (= reduce-scatter then
all-gather).  Per step, for Ψ parameters (ZeRO paper, section 7):

    ddp      all-reduce of the gradients                       2Ψ·(n-1)/n
    zero1/2  reduce-scatter of gradients + all-gather of       2Ψ·(n-1)/n
             the updated parameters (same volume as DDP)
    zero3    all-gather in forward, all-gather in backward,    3Ψ·(n-1)/n
             reduce-scatter of gradients
    hybrid   zero3 inside a node (n = its GPUs), then an       3Ψ·(n-1)/n intra-node
             all-reduce of each gradient shard across the      2(Ψ/n)·(r-1)/r inter-node
             r nodes

Volumes are in elements times the bytes of a communicated element (2 for 16-bit
training, 4 for fp32).  With tensor parallelism each rank carries Ψ/t and the
data-parallel group is N/t ranks.  Time: with a bus bandwidth typed in, nccl-tests'
rule (a collective whose per-rank volume is V bytes takes V / busbw seconds); else the
cost model (pycollect.costmodel), the best of its algorithms for each collective:

    ddp      all-reduce(L) over n                    L = Ψ/(t·p) x element bytes
    zero1/2  reduce-scatter(L) + all-gather(L) over n
    zero3    2 all-gather(L) + reduce-scatter(L) over n
    hybrid   zero3 over the n ranks of a node, then all-reduce(L/n) over the r nodes
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..costmodel import FORMULAS, Params, choose, predict
from .states import Layout


@dataclass(frozen=True)
class CommEstimate:
    """Bytes each rank sends (and receives) per step, and the time at a bus bandwidth."""

    stage: str
    bytes_per_rank: float  # over the sharding / data-parallel group (intra-node for hybrid)
    inter_node_bytes_per_rank: float = 0.0  # hybrid only: the cross-node all-reduce
    time_s: Optional[float] = None  # None when no bandwidth was given

    @property
    def total_bytes_per_rank(self) -> float:
        return self.bytes_per_rank + self.inter_node_bytes_per_rank

    @property
    def gb_per_rank(self) -> float:
        return self.total_bytes_per_rank / 1e9


def comm_bytes(params: float, stage: str, lay: Layout, element_bytes: int) -> tuple[float, float]:
    """(group bytes, inter-node bytes) each rank moves per step; see the module table."""
    local = params / lay.model_parallel * element_bytes
    if stage == "hybrid":
        n, r = lay.shard_degree, lay.replicas
        return 3 * local * (n - 1) / n, 2 * (local / n) * (r - 1) / r
    n = lay.dp_degree
    factor = 3 if stage == "zero3" else 2
    return factor * local * (n - 1) / n, 0.0


def comm_time(group_bytes: float, inter_bytes: float, bus_bandwidth_gbs: Optional[float],
              inter_node_bandwidth_gbs: Optional[float]) -> Optional[float]:
    """Seconds at ``bus_bandwidth_gbs`` (GB/s, nccl-tests busbw); inter-node bytes at
    ``inter_node_bandwidth_gbs`` when given, else at the same bus bandwidth."""
    if bus_bandwidth_gbs is None:
        return None
    inter_bw = inter_node_bandwidth_gbs or bus_bandwidth_gbs
    return group_bytes / (bus_bandwidth_gbs * 1e9) + inter_bytes / (inter_bw * 1e9)


def _best(op: str, nbytes: float, ranks: int, model: Params) -> float:
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return predict(op, nbytes, ranks, choose(op, nbytes, ranks, model, FORMULAS[op]), model)


def comm_time_model(params: float, stage: str, lay: Layout, element_bytes: int, model: Params) -> float:
    """Seconds per step by the cost model (see the module table), each collective by its
    fastest algorithm; all-gather and reduce-scatter sizes are the whole gathered L."""
    local = params / lay.model_parallel * element_bytes
    if stage == "hybrid":
        n, r = lay.shard_degree, lay.replicas
        return (2 * _best("all_gather", local, n, model) + _best("reduce_scatter", local, n, model)
                + _best("all_reduce", local / n, r, model))
    n = lay.dp_degree
    if stage == "ddp":
        return _best("all_reduce", local, n, model)
    gathers = 2 if stage == "zero3" else 1
    return gathers * _best("all_gather", local, n, model) + _best("reduce_scatter", local, n, model)
