"""Options.from_env (every PYCOLLECT_* variable, read once, checked), Algo, timeouts, and
what importing a part of pycollect loads."""
from __future__ import annotations

import datetime
import subprocess
import sys

import pytest

from pycollect.options import DEFAULT_TIMEOUT, MAX_TIMEOUT, Options, to_seconds, to_timedelta
from pycollect.types import Algo


def test_defaults_leave_the_engine_alone():
    o = Options.from_env({"PATH": "/bin"})
    assert o == Options()
    assert o.algo is Algo.AUTO and o.segment_bytes is None and o.socket_ifname is None


def test_every_variable_is_read():
    o = Options.from_env({"PYCOLLECT_ALGO": "Ring", "PYCOLLECT_SEGMENT_BYTES": "4096", "PYCOLLECT_INFLIGHT": "2",
                          "PYCOLLECT_DIRECT_MAX_BYTES": "0", "PYCOLLECT_SOCKET_BUFFER": " 65536 ",
                          "PYCOLLECT_SOCKET_IFNAME": "lo"})
    assert o == Options(algo=Algo.RING, segment_bytes=4096, inflight=2, direct_max_bytes=0, socket_buffer=65536,
                        socket_ifname="lo")


@pytest.mark.parametrize("env, words", [
    ({"PYCOLLECT_SEGMENT_BYTES": "0"}, "PYCOLLECT_SEGMENT_BYTES='0' must be >= 1"),
    ({"PYCOLLECT_SEGMENT_BYTES": "1M"}, "PYCOLLECT_SEGMENT_BYTES='1M' is not an integer"),
    ({"PYCOLLECT_INFLIGHT": "-1"}, "PYCOLLECT_INFLIGHT='-1' must be >= 1"),
    ({"PYCOLLECT_SOCKET_BUFFER": "-5"}, "PYCOLLECT_SOCKET_BUFFER='-5' must be >= 0"),
    ({"PYCOLLECT_ALGO": "trie"}, "PYCOLLECT_ALGO='trie': choose one of auto, ring, direct, halving_doubling"),
    ({"PYCOLLECT_SEGMENT_BYTE": "4096"}, "unknown environment variable(s) PYCOLLECT_SEGMENT_BYTE"),
])
def test_bad_values_name_the_variable(env, words):
    with pytest.raises(ValueError) as info:
        Options.from_env(env)
    assert words in str(info.value)


def test_algo_parse():
    assert Algo.parse("direct", "x") is Algo.DIRECT and Algo.parse(Algo.RING, "x") is Algo.RING
    with pytest.raises(ValueError, match=r"all_reduce\(algo\)=9"):
        Algo.parse(9, "all_reduce(algo)")


def test_algo_for_call():
    """An explicit algorithm must fit the call; the group's (PYCOLLECT_ALGO) applies where it fits."""
    assert Algo.for_call("all_reduce", "tree", Algo.AUTO) is Algo.TREE
    assert Algo.for_call("all_reduce", None, Algo.HALVING_DOUBLING) is Algo.HALVING_DOUBLING
    assert Algo.for_call("all_reduce", None, Algo.BRUCK) is Algo.AUTO
    assert Algo.for_call("all_gather", None, Algo.BRUCK) is Algo.BRUCK
    assert Algo.for_call("all_gather", None, Algo.DIRECT) is Algo.AUTO
    assert Algo.for_call("all_gather", None, Algo.RING) is Algo.RING
    with pytest.raises(ValueError, match=r"all_reduce\(algo\)='bruck' is not an algorithm of all_reduce.*tree"):
        Algo.for_call("all_reduce", "bruck", Algo.AUTO)
    with pytest.raises(ValueError, match=r"all_gather\(algo\)='tree' is not an algorithm of all_gather.*bruck"):
        Algo.for_call("all_gather", Algo.TREE, Algo.AUTO)
    assert Options.from_env({"PYCOLLECT_ALGO": "halving_doubling"}).algo is Algo.HALVING_DOUBLING


def test_timeouts():
    assert to_timedelta(float("inf")) == MAX_TIMEOUT and to_timedelta(1e10) == MAX_TIMEOUT
    assert to_timedelta(datetime.timedelta(seconds=1e10)) == MAX_TIMEOUT
    assert to_seconds(float("inf")) is None and to_seconds(1e12) == MAX_TIMEOUT.total_seconds()
    with pytest.raises(ValueError, match="NaN"):
        to_seconds(float("nan"))
    assert to_timedelta(None) == DEFAULT_TIMEOUT
    assert to_timedelta(2.5) == datetime.timedelta(seconds=2.5)
    assert to_timedelta(datetime.timedelta(minutes=1)) == datetime.timedelta(minutes=1)
    with pytest.raises(ValueError, match="positive"):
        to_timedelta(0)
    assert to_seconds(None) is None and to_seconds(3) == 3.0
    assert to_seconds(datetime.timedelta(milliseconds=1500)) == 1.5


def _loaded_after(code: str) -> set:
    script = code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return set(out.stdout.split())


def test_memory_planner_loads_neither_torch_nor_the_engine():
    loaded = _loaded_after("import pycollect.memory; pycollect.memory.gpus_needed(70)")
    assert "pycollect.memory" in loaded
    assert "torch" not in loaded and "pycollect._C" not in loaded


def test_cli_memory_loads_neither_torch_nor_the_engine():
    loaded = _loaded_after("from pycollect.cli import main; main(['memory', '--params', '7B', '--gpus', '8'])")
    assert "torch" not in loaded and "pycollect._C" not in loaded


@pytest.mark.parametrize("order", ["pycollect first", "torch first"])
def test_backend_is_registered_whatever_the_import_order(order):
    imports = ["import pycollect", "import torch.distributed as dist"]
    if order == "torch first":
        imports.reverse()
    code = "; ".join(imports) + "; import torch.distributed as dist; print('pycollect' in dist.Backend.backend_list)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "True", out.stderr


def test_secret_and_link_timeout(tmp_path):
    path = tmp_path / "secret"
    path.write_bytes(b"s3cret\n")
    o = Options.from_env({"PYCOLLECT_SECRET_FILE": str(path), "PYCOLLECT_LINK_TIMEOUT": "2.5"})
    assert o.secret == b"s3cret" and o.link_timeout == 2.5
    assert "s3cret" not in repr(o)
    assert Options.from_env({"PYCOLLECT_SECRET": "abc"}).secret == b"abc"
    for env, words in [({"PYCOLLECT_SECRET": "a", "PYCOLLECT_SECRET_FILE": str(path)}, "not both"),
                       ({"PYCOLLECT_SECRET_FILE": str(tmp_path / "none")}, "cannot be read"),
                       ({"PYCOLLECT_SECRET": " "}, "empty"),
                       ({"PYCOLLECT_LINK_TIMEOUT": "0"}, "positive"),
                       ({"PYCOLLECT_LINK_TIMEOUT": "inf"}, "finite"),
                       ({"PYCOLLECT_LINK_TIMEOUT": "soon"}, "not a number")]:
        with pytest.raises(ValueError, match=words):
            Options.from_env(env)


def test_the_models_copies_of_engine_constants_are_the_engines():
    """pycollect.types and pycollect.tuning keep copies of engine constants so that the model
    and the planner load no engine (the tests above); here the copies meet the engine's own."""
    from pycollect import _C
    from pycollect.tuning import DEFAULT_SEGMENT_BYTES, SHM_SINGLE_COPY_BYTES, formulas, hierarchy
    from pycollect.types import DTYPE_CODES, DTYPE_SIZES

    engine = _C.ENGINE_DEFAULTS
    assert DEFAULT_SEGMENT_BYTES == engine["segment_bytes"] == _C.CommOptions().segment_bytes
    assert formulas.RING_BLOCK_SEGMENTS == engine["ring_block_segments"]
    assert SHM_SINGLE_COPY_BYTES == engine["shm_single_copy_bytes"] == _C.CommOptions().shm_single_copy_bytes
    assert hierarchy.PIECE_SEGMENTS == engine["pipeline_piece_segments"]
    assert hierarchy.MAX_PIECES == engine["pipeline_max_pieces"]
    assert {name: (DTYPE_CODES[name], DTYPE_SIZES[name]) for name in DTYPE_CODES} == _C.DTYPES
