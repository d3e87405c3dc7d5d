"""Options.from_env (every PYCOLLECT_* variable, read once, checked), Algo, timeouts, and
what importing a part of pycollect loads."""
from __future__ import annotations

import datetime
import pathlib
import re
import subprocess
import sys

import pytest

from pycollect.options import DEFAULT_TIMEOUT, ELSEWHERE, KNOWN, MAX_TIMEOUT, Options, to_seconds, to_timedelta
from pycollect.types import Algo


def test_defaults_leave_the_engine_alone():
    o = Options.from_env({"PATH": "/bin"})
    assert o == Options()
    assert o.algo is Algo.AUTO and o.segment_bytes is None and o.socket_ifname is None


def test_every_variable_is_read(tmp_path):
    """Each variable Options knows sets its field: all of KNOWN, one value each (the secret's
    two spellings apart, as they exclude each other)."""
    from pycollect.tuning.params import Params

    model = tmp_path / "model.json"
    Params(alpha=5e-6, beta=1 / 50e9, gamma=1 / 10e9).save(str(model))
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(b"from a file\n")
    cases = {  # name: (value, Options attribute, what from_env makes of it)
        "PYCOLLECT_ALGO": ("Ring", "algo", Algo.RING),
        "PYCOLLECT_SEGMENT_BYTES": ("4096", "segment_bytes", 4096),
        "PYCOLLECT_INFLIGHT": ("2", "inflight", 2),
        "PYCOLLECT_DIRECT_MAX_BYTES": ("0", "direct_max_bytes", 0),
        "PYCOLLECT_SOCKET_BUFFER": (" 65536 ", "socket_buffer", 65536),
        "PYCOLLECT_SOCKET_IFNAME": ("lo", "socket_ifname", "lo"),
        "PYCOLLECT_SPIN_US": ("7", "spin_us", 7),
        "PYCOLLECT_LINK_TIMEOUT": ("2.5", "link_timeout", 2.5),
        "PYCOLLECT_SECRET": ("abc", "secret", b"abc"),
        "PYCOLLECT_TRANSPORT": ("TCP", "transport", "tcp"),
        "PYCOLLECT_LINKS": ("All", "links", "all"),
        "PYCOLLECT_HOST_TAG": ("h1", "host_tag", "h1"),
        "PYCOLLECT_STAGING_BYTES": ("1024", "staging_bytes", 1024),
        "PYCOLLECT_SHM_SINGLE_COPY_BYTES": ("4096", "shm_single_copy_bytes", 4096),
        "PYCOLLECT_TRACE": ("1", "trace", True),
        "PYCOLLECT_MODEL": (str(model), "model", str(model)),
        "PYCOLLECT_BLOCKING_WAIT": ("1", "blocking_wait", True),
        "PYCOLLECT_FLIGHT_DIR": (str(tmp_path), "flight_dir", str(tmp_path)),
        "PYCOLLECT_FLIGHT_ENTRIES": ("0", "flight_entries", 0),
        "PYCOLLECT_EAGER_BYTES": ("0", "eager_bytes", 0),
        "PYCOLLECT_SHM_COLLECTIVE_BYTES": ("0", "shm_collective_bytes", 0),
    }
    alone = {"PYCOLLECT_SECRET_FILE": (str(secret_file), "secret", b"from a file")}
    assert set(cases) | set(alone) == KNOWN  # a new variable needs its case here
    o = Options.from_env({name: value for name, (value, _, _) in cases.items()})
    for name, (_value, attr, expected) in cases.items():
        assert getattr(o, attr) == expected != getattr(Options(), attr), name
    for name, (value, attr, expected) in alone.items():
        assert getattr(Options.from_env({name: value}), attr) == expected, name


@pytest.mark.parametrize("env, words", [
    ({"PYCOLLECT_SEGMENT_BYTES": "0"}, "PYCOLLECT_SEGMENT_BYTES='0' must be >= 1"),
    ({"PYCOLLECT_SEGMENT_BYTES": "1M"}, "PYCOLLECT_SEGMENT_BYTES='1M' is not an integer"),
    ({"PYCOLLECT_INFLIGHT": "-1"}, "PYCOLLECT_INFLIGHT='-1' must be >= 1"),
    ({"PYCOLLECT_SOCKET_BUFFER": "-5"}, "PYCOLLECT_SOCKET_BUFFER='-5' must be >= 0"),
    ({"PYCOLLECT_ALGO": "trie"}, "PYCOLLECT_ALGO='trie': choose one of auto, ring, direct, halving_doubling"),
    ({"PYCOLLECT_SEGMENT_BYTE": "4096"}, "unknown environment variable(s) PYCOLLECT_SEGMENT_BYTE"),
    ({"PYCOLLECT_LINKS": "ring"}, "PYCOLLECT_LINKS='ring' must be one of used, all"),
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
    from pycollect.tuning import DEFAULT_SEGMENT_BYTES, SHM_SINGLE_COPY_BYTES, arena, formulas, hierarchy
    from pycollect.types import DTYPE_CODES, DTYPE_SIZES

    engine = _C.ENGINE_DEFAULTS
    assert DEFAULT_SEGMENT_BYTES == engine["segment_bytes"] == _C.CommOptions().segment_bytes
    assert formulas.RING_BLOCK_SEGMENTS == engine["ring_block_segments"]
    assert SHM_SINGLE_COPY_BYTES == engine["shm_single_copy_bytes"] == _C.CommOptions().shm_single_copy_bytes
    assert hierarchy.SLICE_SEGMENTS == engine["pipeline_slice_segments"]
    assert hierarchy.MAX_SLICES == engine["pipeline_max_slices"]
    assert (arena.SLOT_BYTES, arena.ONE_PHASE_BYTES, arena.PIPE_BYTES) == (
        engine["arena_slot_bytes"], engine["arena_one_phase_bytes"], engine["arena_pipe_bytes"])
    assert (arena.SHARED_BROADCAST_BYTES, arena.SHARED_LARGE_BYTES) == engine["shm_collective_bytes"][1:]
    assert {name: (DTYPE_CODES[name], DTYPE_SIZES[name]) for name in DTYPE_CODES} == _C.DTYPES


ROOT = pathlib.Path(__file__).resolve().parent.parent
REFERENCE = "docs/configuration.md"  # the table that lists every variable


def _variable_tables():
    """Every markdown table in README.md and docs/*.md with a `variable` column: (file,
    {variable: default cell or None where the table has no default column})."""
    tables = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        rows = None
        for line in path.read_text().splitlines() + [""]:
            cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else None
            if cells is None:
                if rows is not None:
                    tables.append((str(path.relative_to(ROOT)), rows))
                rows = None
            elif rows is None:
                header = [c.lower() for c in cells]
                if "variable" in header:
                    rows, name_at = {}, header.index("variable")
                    default_at = header.index("default") if "default" in header else None
                else:
                    rows = None
            elif not set(cells[name_at]) <= set("-: "):
                name = cells[name_at].strip("`")
                rows[name] = cells[default_at] if default_at is not None else None
    return tables


def _documented_defaults():
    """What the code does when a variable is unset: the numbers (a set: the choice of a rule),
    a word, or None where there is no default value to state."""
    from pycollect import _C
    from pycollect.options import default_single_copy_bytes, default_spin_us
    from pycollect.torch_backend import builder

    engine, o = _C.CommOptions(), Options.from_env({})
    many = 1 << 20  # ranks on a host: more than it has cores
    return {
        "PYCOLLECT_ALGO": o.algo.name.lower(),
        "PYCOLLECT_SEGMENT_BYTES": {engine.segment_bytes},
        "PYCOLLECT_INFLIGHT": {engine.inflight},
        "PYCOLLECT_SOCKET_BUFFER": {engine.socket_buffer},
        "PYCOLLECT_SPIN_US": {default_spin_us(1), default_spin_us(many)},
        "PYCOLLECT_LINK_TIMEOUT": {_C.ENGINE_DEFAULTS["link_timeout"]},
        "PYCOLLECT_TRANSPORT": engine.transport,
        "PYCOLLECT_SHM_SINGLE_COPY_BYTES": {default_single_copy_bytes(1), default_single_copy_bytes(many)},
        "PYCOLLECT_STAGING_BYTES": {engine.staging_bytes},
        "PYCOLLECT_BLOCKING_WAIT": {int(Options.from_env({"CUDA_DEVICE_MAX_CONNECTIONS": "1"}).blocking_wait),
                                    int(o.blocking_wait)},
        "PYCOLLECT_TRACE": {int(o.trace), int(engine.trace)},
        "PYCOLLECT_FLIGHT_ENTRIES": {engine.flight_entries},
        "PYCOLLECT_EAGER_BYTES": {engine.eager_bytes},
        "PYCOLLECT_SHM_COLLECTIVE_BYTES": set(_C.ENGINE_DEFAULTS["shm_collective_bytes"]),  # per call
        "PYCOLLECT_BUILD_TORCH_BACKEND": {builder.SWITCH_DEFAULT},
    }


_UNIT = {"": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def _stated(cell: str):
    """The values a default cell states, outside parentheses (where it explains): its numbers
    with their units, else its first word."""
    text = re.sub(r"\([^)]*\)", "", cell).replace("`", "")
    numbers = {float(n) * _UNIT[u] for n, u in re.findall(r"(?<![\w.])(\d+(?:\.\d+)?)\s*(KiB|MiB|GiB)?(?![\w.])",
                                                           text)}
    return numbers or text.split()[0].strip(",;") if text.split() else None


def test_the_docs_tables_of_variables_are_the_code():
    tables = _variable_tables()
    assert REFERENCE in {f for f, _ in tables}, tables
    for f, rows in tables:
        read = KNOWN | ELSEWHERE
        assert set(rows) <= read, f"{f}: {sorted(set(rows) - read)} is not a variable pycollect reads"
        if f == REFERENCE:
            assert set(rows) == read, f"{f} leaves out {sorted(read - set(rows))}"
    defaults = _documented_defaults()
    for f, rows in tables:
        for name, cell in rows.items():
            if cell is None:
                continue
            stated, code = _stated(cell), defaults.get(name)
            if isinstance(code, set):
                assert stated == {float(v) for v in code}, f"{f}: {name}'s default is {cell!r}, the code's {code}"
            elif isinstance(code, str):
                assert stated == code, f"{f}: {name}'s default is {cell!r}, the code's {code!r}"
            else:
                assert not isinstance(stated, set), f"{f}: {name} has no default value, the table states {cell!r}"
