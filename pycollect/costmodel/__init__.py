"""pycollect.costmodel: what a collective costs, by the alpha-beta-gamma model.

    from pycollect.costmodel import Params, predict, choose
    p = Params(alpha=5e-6, beta=1 / 50e9, gamma=1 / 20e9)      # a 400 Gb/s NIC, 5 us latency
    predict("all_reduce", 1 << 30, 64, "ring", p)              # seconds
    choose("all_reduce", 1 << 10, 64, p)                       # "tree" or whichever is fastest

Pure Python, no torch and no engine at import. The parts the engine needs at run time
(the parameters, the formulas, predict / choose and the automatic-choice table) live in
pycollect.tuning, below the process group, and are re-exported here; this package adds
the tools above them (and, from tuning.compressed, what a compressed all-reduce costs and
where it pays: pays, pays_from): fit.py (least squares from benchmark rows) and measure.py (probe
and validate: these run the engine). busbw is nccl-tests' (pycollect.measuring).
"""
from ..measuring import bus_bandwidth
from ..tuning.compressed import compressed_ring, pays, pays_from
from ..tuning import (DEFAULT_PATH, DEFAULT_SEGMENT_BYTES, ENGINE_ALGOS, FORMULAS, Params, auto_table, choose,
                      crossovers, engine_choice, parse_rate, parse_time, predict)

__all__ = ["Params", "predict", "choose", "engine_choice", "bus_bandwidth", "auto_table", "crossovers", "FORMULAS",
           "ENGINE_ALGOS", "DEFAULT_SEGMENT_BYTES", "DEFAULT_PATH", "parse_time", "parse_rate", "compressed_ring", "pays",
           "pays_from"]
