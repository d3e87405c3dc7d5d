"""Tensor parallelism on pycollect's engine (Megatron-LM style): layers whose weights are
split across the ranks of a group, and the conjugate communication operators they use.

    from pycollect.tp import ColumnParallelLinear, RowParallelLinear, ParallelBlock
    block = ParallelBlock.from_block(full_block, group=tp_group)   # this rank's heads and units

Files: comms.py (copy/reduce/gather/split: the autograd operators), layers.py (column-
and row-parallel linear, vocabulary-parallel embedding), block.py (a transformer block).
"""
from .block import ParallelBlock, ParallelSelfAttention
from .comms import copy_to_tp, gather_from_tp, reduce_from_tp, split_to_tp
from .layers import ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding, tp_degree

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "VocabParallelEmbedding", "ParallelBlock",
           "ParallelSelfAttention", "copy_to_tp", "reduce_from_tp", "gather_from_tp", "split_to_tp", "tp_degree"]
