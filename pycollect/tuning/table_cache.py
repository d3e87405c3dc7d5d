"""Automatic-choice tables kept on disk between formations.

Rank 0 builds a group's tables from the cost model at every formation (formation.py):
15-25 ms of arithmetic on a 2-core machine, a fifth of the CPU that forming 16 ranks
takes there, and the same inputs give the same tables every time a job starts, restarts or
makes a group of the same size. So the tables are kept in a file named by a digest of
everything they depend on: the parameters (their JSON form), the group's size, the
segment size, the algorithms and limits the choice runs among, and the source of the
tuning package itself (an edit to a formula is a new digest). A file that is missing,
unreadable or not what it should be is rebuilt; one that cannot be written is skipped.

The directory is pycollect's cache's auto-tables (cache.py: ~/.cache/pycollect by default),
one small JSON file per (model, size, segment) seen: safe to delete at any time.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable, Dict, Optional

from .. import cache

_SOURCES = ("choice.py", "formulas.py", "params.py")  # what a table is computed by
_source_digest: Optional[str] = None


def directory() -> Path:
    return cache.directory("auto-tables")


def _code() -> str:
    global _source_digest
    if _source_digest is None:
        h = hashlib.sha256()
        here = Path(__file__).parent
        for name in _SOURCES:
            h.update((here / name).read_bytes())
        _source_digest = h.hexdigest()
    return _source_digest


def digest(inputs: dict) -> str:
    """The file name's digest of `inputs` (JSON-able: whatever the tables depend on besides
    the tuning code, which is added here)."""
    text = json.dumps({"inputs": inputs, "code": _code()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def cached(inputs: dict, build: Callable[[], Dict[str, list]]) -> Dict[str, list]:
    """The tables for `inputs`: from the file named by their digest when it holds them,
    else build() (and written there for the next formation)."""
    key = digest(inputs)
    path = directory() / f"{key}.json"
    try:
        kept = json.loads(path.read_text())
        if kept.get("key") == key and isinstance(kept.get("tables"), dict):
            return {field: [tuple(row) for row in rows] for field, rows in kept["tables"].items()}
    except (OSError, ValueError, AttributeError, TypeError):
        pass  # not there, or not ours: build it
    tables = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    except OSError:
        return tables  # a read-only disk: the tables stand, just not kept
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"key": key, "inputs": inputs, "tables": tables}, f)
        os.replace(tmp, path)  # whole or not at all, whoever else writes it at once
    except OSError:
        Path(tmp).unlink(missing_ok=True)  # a full disk: likewise
    return tables
