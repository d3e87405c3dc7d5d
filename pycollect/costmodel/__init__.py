"""pycollect.costmodel: what a collective costs, by the alpha-beta-gamma model.

    from pycollect.costmodel import Params, predict, choose
    p = Params(alpha=5e-6, beta=1 / 50e9, gamma=1 / 20e9)      # a 400 Gb/s NIC, 5 us latency
    predict("all_reduce", 1 << 30, 64, "ring", p)              # seconds
    choose("all_reduce", 1 << 10, 64, p)                       # "tree" or whichever is fastest

Pure Python, no torch and no engine at import. Files: params.py (parameters, units, JSON),
formulas.py (one function per algorithm), choice.py (predict, busbw, choose, the engine's
automatic-choice table), fit.py (least squares from benchmark rows), measure.py (probe and
validate: these run the engine).
"""
from .choice import ENGINE_ALGOS, auto_table, bus_bandwidth, choose, crossovers, engine_choice, predict
from .formulas import DEFAULT_SEGMENT_BYTES, FORMULAS
from .params import DEFAULT_PATH, Params, parse_rate, parse_time

__all__ = ["Params", "predict", "choose", "engine_choice", "bus_bandwidth", "auto_table", "crossovers", "FORMULAS",
           "ENGINE_ALGOS", "DEFAULT_SEGMENT_BYTES", "DEFAULT_PATH", "parse_time", "parse_rate"]
