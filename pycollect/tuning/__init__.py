"""pycollect.tuning: what the engine needs of the cost model at run time.

A group builds its automatic-choice table at formation (formation.py): the parameters
(params.py: the alpha-beta-gamma figures, their JSON form), the formulas (formulas.py:
one function per algorithm) and the choice (choice.py: predict, choose, the table).
Pure Python, importing only pycollect.types: no torch, no engine, no study tool. The
tools that fit and check these parameters (pycollect.costmodel: fit, probe, validate)
sit above it and re-export its names.
"""
from .choice import ENGINE_ALGOS, auto_table, choose, crossovers, engine_choice, predict
from .formulas import DEFAULT_SEGMENT_BYTES, FORMULAS
from .params import DEFAULT_PATH, SHM_SINGLE_COPY_BYTES, SHM_SINGLE_COPY_BYTES_FIT, Params, parse_rate, parse_time

__all__ = ["Params", "predict", "choose", "engine_choice", "auto_table", "crossovers", "FORMULAS", "ENGINE_ALGOS",
           "DEFAULT_SEGMENT_BYTES", "DEFAULT_PATH", "SHM_SINGLE_COPY_BYTES", "SHM_SINGLE_COPY_BYTES_FIT",
           "parse_time", "parse_rate"]
