"""Pipeline parallelism on pycollect's engine: a sequential model cut into stages, one
stage per rank, micro-batches flowing forward and their gradients flowing back over the
engine's point-to-point calls (pc.isend / pc.irecv). See docs/pp.md.

    from pycollect.pp import Pipeline, split_stages, gpt_pieces
    stages = split_stages(gpt_pieces(model), pc.get_world_size(group))  # same cut on every rank
    pipe = Pipeline(stages, lm_loss, micro_batches=4, schedule="1f1b", group=group)
    loss = pipe.step(tokens, targets)        # mean loss over the micro-batches, on every rank
    print(pipe.bubble().table())             # measured idle time beside (p-1)/(m+p-1)

Two schedules, both flushing the pipeline every batch (so one step equals one process on
the whole batch): GPipe (Huang et al. 2019), all forwards then all backwards, and 1F1B
(PipeDream-Flush, Narayanan et al. 2021), which interleaves them so that stage s holds at
most p-s micro-batches' activations instead of m. Both idle (p-1)/(m+p-1) of a step.

Files: pipeline.py (the wrapper: runs a schedule on one stage) -> communications.py (the
activations and gradients between neighbours) ; schedules.py (pure: the orders, a
timeline simulator, the textbook bubble) ; split.py (stages from layers, GPT pieces) ;
bubble.py (measured bubble stats) ; train.py (train_steps, for the demo).
"""
from .bubble import BubbleStats
from .communications import StageLinks
from .pipeline import Pipeline, layout_lines
from .schedules import GPIPE, ONE_F_ONE_B, SCHEDULES, schedule_order, simulate, textbook_bubble, timeline
from .split import GPTEmbedding, GPTFinal, balance_by_params, gpt_pieces, split_stages
from .train import train_steps

__all__ = [
    "Pipeline", "split_stages", "balance_by_params", "gpt_pieces", "GPTEmbedding", "GPTFinal", "train_steps",
    "BubbleStats", "StageLinks", "layout_lines", "GPIPE", "ONE_F_ONE_B", "SCHEDULES", "schedule_order",
    "simulate", "textbook_bubble", "timeline",
]
