"""bench/formation.py in miniature: 4 ranks, 1 repeat, both engines. The table has a row per
engine with positive times (+ar after form) and descriptor, thread and RSS figures; the JSON
says the same; --phases adds pycollect's step timings and store call counts."""
import json
import os
import re
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "bench", "formation.py")


def test_formation_bench_prints_both_engines(tmp_path):
    out = tmp_path / "f.json"
    r = subprocess.run([sys.executable, SCRIPT, "-n", "4", "-r", "1", "--phases", "--json", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = {}
    for line in r.stdout.splitlines():
        m = re.match(r"\s*4 (pycollect|gloo)\s+([\d.]+)\s+([\d.]+)\s+(\d+)/(\d+)\s+(\d+)\s+(\d+)/(\d+)\s+(\d+)/(\d+)",
                     line)
        if m:
            rows[m.group(1)] = [float(x) for x in m.groups()[1:]]
    assert set(rows) == {"pycollect", "gloo"}, r.stdout
    for engine, (form, ar, fds_med, fds_max, fds_r0, thr_med, thr_max, rss_med, rss_max) in rows.items():
        assert 0 < form <= ar, (engine, r.stdout)
        assert 0 < fds_med <= fds_max and fds_r0 > 0, (engine, r.stdout)
        assert 0 < thr_med <= thr_max and 0 < rss_med <= rss_max, (engine, r.stdout)
    assert "repeat 1/1" in r.stdout  # progress lines
    data = json.loads(out.read_text())
    row = data["table"]["4"]
    assert row["pycollect"]["form_s"] > 0 and row["gloo"]["form_s"] > 0
    phases = data["phases"]["4"]
    assert phases["phases"]["exchange"]["max"] > 0 and phases["phases"]["cxx_connect"]["max"] > 0
    store = phases["store"]
    assert store["set.calls"]["rank0"] >= 2  # its address, the token
    assert store["multi_set.calls"]["rank0"] == 2  # the roster and model, then the 3 answers at once
    assert store["multi_get.calls"]["rank0"] == 1  # the 3 addresses at once


def test_formation_bench_refuses_large_n_without_the_flag():
    r = subprocess.run([sys.executable, SCRIPT, "-n", "128"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--allow-large" in r.stderr, r.stderr


def test_sixty_four_light_ranks_make_only_the_links_they_use():
    """64 ranks without torch (bench/formation_light.py) form a group: after a ring all-reduce
    each holds the same few descriptors (its two neighbours' links, the listener, its
    wake-ups), whatever the group's size; an all-to-all then makes every other link on
    first use. Both results are checked against numpy."""
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        import formation_light
    finally:
        sys.path.pop(0)
    ranks = formation_light.run(64, timeout=120, all_to_all=True)
    formation_light.check(ranks)  # the all-reduce and the all-to-all against numpy
    assert all("received" in r for r in ranks) and len(ranks) == 64
    assert {r["links_ring"] for r in ranks} == {2}, sorted({r["links_ring"] for r in ranks})
    ring_fds = {r["ring"]["fds"] for r in ranks}
    assert max(ring_fds) <= 12, ring_fds  # a constant: 2 links of 2 descriptors, + 4 of the group's own
    assert {r["links_all"] for r in ranks} == {63}
    for r in ranks:  # 61 more shared-memory links of 2 descriptors (the TCP doorbell, the peer's Bell); nothing else
        assert r["all"]["fds"] - r["ring"]["fds"] == 61 * 2, (r["rank"], r["all"], r["ring"])


@pytest.mark.slow
def test_torchrun_formation_bench_times_both_engines_in_the_same_ranks(tmp_path):
    """bench/formation_torchrun.py: 2 torchrun-started ranks, both engines in each launch, the
    order alternated; every row has its times, the CPU, and pycollect's imports apart."""
    out = tmp_path / "rows.json"
    script = os.path.join(os.path.dirname(SCRIPT), "formation_torchrun.py")
    r = subprocess.run([sys.executable, script, "-n", "2", "--repeats", "2", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())
    assert [(g["engine"], g["position"]) for g in rows] == [("pycollect", 0), ("gloo", 1), ("gloo", 0),
                                                            ("pycollect", 1)]
    for g in rows:
        assert 0 < g["rank0_s"] <= g["slowest_s"] < 60 and g["formed_s"] <= g["slowest_s"] and g["cpu_s"] > 0
        assert (g["import_cpu_s"] > 0) == (g["engine"] == "pycollect")
    assert "pycollect's lazy imports" in r.stdout and "ratio" in r.stdout
