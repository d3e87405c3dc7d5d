"""The cost model against measurements, as rows and figures: what `pycollect model`
--validate, --compare and --predict print (pycollect/cli/model.py only formats them).

    rows = saved_rows(["v.json"], params)        # earlier `--validate --json` samples, predicted again
    s = summarize(rows)                           # how many are within the target; the noisy ones
    c = choice_check(rows, params)                # the automatic choice against the fastest measured
    a = arena_check(rows, params)                 # the arena or the links: the model's pick, the engine's rule
    cmp = compare("a.json", "b.json")             # two measurements of one engine, point by point
    table = prediction_table("all_reduce", 1 << 30, [8, 16], ["ring", "tree"], params)

The targets: a prediction within LOOPBACK_TARGET (25 %) of the measured time, and the
automatic choice never more than CHOICE_TARGET (10 %) slower than the fastest algorithm.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from ..tuning import DEFAULT_PATH, FORMULAS, Params, crossovers, engine_choice, parse_rate, parse_time, predict
from ..tuning import arena
from .fit import samples_from_bench
from .measure import Row

LOOPBACK_TARGET = 0.25  # predicted within 25 % of measured on loopback ...
HOSTS_TARGET = 0.15  # ... and within 15 % on rate-limited namespace hosts
CHOICE_TARGET = 0.10  # the automatic choice: never more than 10 % slower than the fastest


def params_with(path: Optional[str] = None, alpha: Optional[str] = None, beta: Optional[str] = None,
                gamma: Optional[str] = None, overhead: Optional[str] = None,
                overlap: Optional[float] = None) -> Params:
    """The parameters to use: the file `path`, else PYCOLLECT_MODEL, else the fitted default
    file, else the built-in ones; alpha / beta / gamma / overhead (texts with units: "5us",
    "400gbit") and overlap on top. Typed values describe a cluster: a rank per core and one
    speed per byte whatever the size (a NIC's bytes do not get faster in the CPU caches)."""
    path = path or os.environ.get("PYCOLLECT_MODEL") or (DEFAULT_PATH if os.path.isfile(DEFAULT_PATH) else None)
    params = Params.load(path) if path else Params()
    changes: Dict[str, float] = {}
    if alpha is not None:
        changes["alpha"] = parse_time(alpha)
    if beta is not None:
        changes["beta"] = parse_rate(beta)
    if gamma is not None:
        changes["gamma"] = parse_rate(gamma)
    if overhead is not None:
        changes["overhead"] = parse_time(overhead)
    if overlap is not None:
        changes["overlap"] = overlap
    if changes:
        params = params.for_cluster(source=f"{params.source} with {', '.join(sorted(changes))} given", **changes)
    return params


def parse_world_sizes(text: str) -> List[int]:
    """'2,3,4' -> [2, 3, 4]; '8..64' -> [8, 16, 32, 64]; '8..32+8' -> [8, 16, 24, 32]; '2..162*3' -> [2, 6, 18, 54, 162]."""
    out: List[int] = []
    for part in str(text).split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:\.\.\s*(\d+)\s*(?:([+*])\s*(\d+))?)?\s*", part)
        if not m:
            raise ValueError(f"cannot read world sizes {part!r}: use 2,3,4 or 8..4096 (doubling), 8..64+8, 8..4096*4")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        how, step = m.group(3) or "*", int(m.group(4) or 2)
        if lo < 1 or hi < lo or step < 1 or (how == "*" and step < 2):
            raise ValueError(f"world sizes {part!r}: need 1 <= first <= last and a step that grows")
        x = lo
        while x <= hi:
            out.append(x)
            x = x + step if how == "+" else x * step
        if out[-1] != hi:
            out.append(hi)
    return sorted(set(out))


def saved_samples(path: str) -> List[tuple]:
    """The samples of one `--validate --json` file, each with its second launch's spread
    (nan where not recorded): (op, algo, nbytes, world_size, seconds, segment, spread)."""
    with open(path) as f:
        data = json.load(f)
    if "samples" not in data:
        raise ValueError(f"{path}: not a `pycollect model --validate --json` file (no samples)")
    spreads = data.get("second_launch") or [None] * len(data["samples"])
    if len(spreads) != len(data["samples"]):  # zip would drop rows without a word
        raise ValueError(f"{path}: {len(spreads)} second_launch entries for {len(data['samples'])} samples")
    return [tuple(s) + (float("nan") if spread is None else spread,)
            for s, spread in zip(samples_from_bench(data), spreads)]


def saved_rows(paths: Sequence[str], params: Params) -> List[Row]:
    """Earlier samples, each with what `params` predict for it (no ranks start)."""
    return [Row(op, algo, p, int(nbytes), seconds, predict(op, nbytes, p, algo, params, seg), second_launch=spread)
            for path in paths for op, algo, nbytes, p, seconds, seg, spread in saved_samples(path)]


@dataclass
class Summary:
    """How rows compare with the target: `beyond` the rows off by more; `noisy` the rows
    whose next-fastest launch was more than the target slower (one launch's figure)."""
    total: int
    beyond: List[Row]
    noisy: List[Row]
    launches_known: bool  # some row recorded its second launch

    @property
    def within(self) -> int:
        return self.total - len(self.beyond)

    @property
    def noisy_beyond(self) -> int:
        return sum(1 for r in self.noisy if r in self.beyond)


def summarize(rows: Sequence[Row], target: float = LOOPBACK_TARGET) -> Summary:
    return Summary(len(rows), [r for r in rows if abs(r.error) > target],
                   [r for r in rows if r.second_launch > target],
                   any(not math.isnan(r.second_launch) for r in rows))


@dataclass
class ChoicePoint:
    slower: float  # the pick's measured time / the fastest's - 1
    op: str
    world_size: int
    nbytes: int
    pick: str
    fastest: str


@dataclass
class ChoiceCheck:
    points: List[ChoicePoint]
    target: float = CHOICE_TARGET

    @property
    def ok(self) -> int:
        return sum(1 for p in self.points if p.slower <= self.target)

    @property
    def worst(self) -> ChoicePoint:
        return max(self.points, key=lambda p: p.slower)


def choice_check(rows: Sequence[Row], params: Params, target: float = CHOICE_TARGET) -> Optional[ChoiceCheck]:
    """Where several algorithms were measured at one (op, ranks, size): the automatic
    choice's pick (engine_choice: the model's best within the engine's limits, near-ties
    to the simpler one) against the fastest measured. None where no point has two."""
    points = []
    for (op, p, nb), measured in _measured(rows, links_only=True):
        if len(measured) < 2:
            continue
        points.append(_point(op, p, nb, measured, engine_choice(op, nb, p, params, list(measured))))
    return ChoiceCheck(points, target) if points else None


def arena_check(rows: Sequence[Row], params: Params,
                target: float = CHOICE_TARGET) -> Optional[Tuple[ChoiceCheck, ChoiceCheck]]:
    """Where the shared arena and a link algorithm were measured at one (op, ranks, size):
    (the model's pick among them all, the engine's pick by its rule: the arena where
    arena.rule_takes_arena says, else the table's link algorithm), each against the
    fastest measured. None where no point has both."""
    model, rule = [], []
    for (op, p, nb), measured in _measured(rows, links_only=False):
        links = [a for a in measured if a != arena.ALGO]
        if arena.ALGO not in measured or not links:
            continue
        model.append(_point(op, p, nb, measured, engine_choice(op, nb, p, params, list(measured))))
        ruled = arena.ALGO if arena.rule_takes_arena(op, nb, p) else engine_choice(op, nb, p, params, links)
        rule.append(_point(op, p, nb, measured, ruled))
    return (ChoiceCheck(model, target), ChoiceCheck(rule, target)) if model else None


def _measured(rows: Sequence[Row], links_only: bool):
    """((op, ranks, bytes), {algo: measured seconds}) per point, sorted; `links_only`: the
    link algorithms alone (the automatic choice's table picks among them)."""
    by: Dict[Tuple[str, int, int], Dict[str, float]] = {}
    for r in rows:
        if not (links_only and r.algo == arena.ALGO):
            by.setdefault((r.op, r.world_size, r.nbytes), {})[r.algo] = r.measured_s
    return sorted(by.items())


def _point(op: str, p: int, nb: int, measured: Dict[str, float], pick: str) -> ChoicePoint:
    return ChoicePoint(measured[pick] / min(measured.values()) - 1, op, p, nb, pick, min(measured, key=measured.get))


@dataclass
class Comparison:
    """Two measurements of one engine, the first read as a prediction of the second."""
    names: Tuple[str, str]
    rows: List[Row]  # predicted_s: the first file's time, measured_s: the second's
    only_one: int  # points in one file only, left out
    target: float = LOOPBACK_TARGET
    beyond: List[Row] = field(default_factory=list)  # more than the target apart
    apart: List[Row] = field(default_factory=list)  # so far apart that no prediction is within the target of both

    @property
    def widest(self) -> float:
        return (1 + self.target) / (1 - self.target)  # 1.25 t is 25 % from both t and t x widest


def compare(paths: Sequence[str], target: float = LOOPBACK_TARGET) -> Comparison:
    """No model's error can be shown smaller than the gap between two measurements: a point
    where they differ by more than the target is one where no prediction is within the
    target of both (beyond 1.25 / 0.75 apart, none can be)."""
    if len(paths) != 2:
        raise ValueError(f"--compare needs --from with two files (given {len(paths)})")
    first, second = ({(op, algo, p, int(n)): t for op, algo, n, p, t, _, _ in saved_samples(path)}
                     for path in paths)
    common = [k for k in first if k in second]
    if not common:
        raise ValueError(f"{paths[0]} and {paths[1]} share no (op, algorithm, ranks, size) point")
    rows = [Row(*k, measured_s=second[k], predicted_s=first[k]) for k in common]
    out = Comparison((os.path.basename(paths[0]), os.path.basename(paths[1])), rows,
                     len(first) + len(second) - 2 * len(common), target)
    out.beyond = [r for r in rows if abs(r.error) > target]
    out.apart = [r for r in rows if max(r.error + 1, 1 / (r.error + 1)) > out.widest]
    return out


@dataclass
class PredictionRow:
    world_size: int
    times: List[float]  # seconds, one per algorithm
    best: str
    crossover: Optional[Tuple[str, str]]  # (before, after) where the best changes at this size


def prediction_table(op: str, nbytes: float, worlds: Sequence[int], algos: Sequence[str],
                     params: Params) -> List[PredictionRow]:
    """Predicted time of each algorithm at each world size, the best, and the crossovers."""
    for a in algos:
        if a not in FORMULAS[op]:
            raise ValueError(f"the model knows no {op} algorithm {a!r}; choose from {', '.join(FORMULAS[op])}")
    cross = {p: (b, a) for p, b, a in crossovers(op, nbytes, worlds, params, algos)}
    rows = []
    for p in worlds:
        times = [predict(op, nbytes, p, a, params) for a in algos]
        rows.append(PredictionRow(p, times, algos[times.index(min(times))], cross.get(p)))
    return rows
