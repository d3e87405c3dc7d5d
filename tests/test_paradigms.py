"""`pycollect demo --paradigm all`: every paradigm trains the same GPT on the same data, so
their losses must agree; the state each rank holds must match the planner's prediction
for its layout (replicated layer norms and biases aside); and the engine's byte counts
must order the paradigms as the textbook says (a pipeline sends activations only)."""
from __future__ import annotations

import pytest

from pycollect.cli import main


@pytest.mark.slow
def test_all_paradigms_agree_and_match_the_planner(capsys):
    assert main(["demo", "--paradigm", "all", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 6 and parts[0] in ("dp", "tp", "pp", "fsdp", "hsdp"):
            rows[parts[0]] = [float(x) for x in parts[1:]]
    assert set(rows) == {"dp", "tp", "pp", "fsdp", "hsdp"}, out
    losses = [r[0] for r in rows.values()]
    assert max(losses) - min(losses) < 1e-3, rows
    for name, (_, state, planner, sent, step_ms) in rows.items():
        assert planner <= state <= planner * 1.1, (name, state, planner)
        assert sent > 0 and step_ms > 0
    assert rows["fsdp"][1] == pytest.approx(rows["dp"][1] / 2, rel=0.01)  # 2 ranks: half of a replica
    assert rows["pp"][3] < rows["dp"][3] / 5  # activations at the cut, not gradients
    assert out.count("[pp  ] step") == 2 and "pp bubble: measured" in out
