"""bench/soak.py in miniature: a few hundred mixed asynchronous calls on 3 local ranks, every
result checked against the reference, resource figures printed for every rank."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))

import soak  # noqa: E402


def test_soak_smoke(capsys):
    assert soak.main(["--ops", "300", "--world-size", "3", "--progress", "100", "--timeout", "120"]) == 0
    out = capsys.readouterr().out
    assert "all 300 calls checked on every rank" in out
    assert re.search(r"^ +\d+ calls checked +[\d.]+ s$", out, re.M), f"no progress line:\n{out}"
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit() and "/" in line]
    assert [r[0] for r in rows] == ["0", "1", "2"], out
    assert "?" not in out, f"a rank did not report its resources:\n{out}"
