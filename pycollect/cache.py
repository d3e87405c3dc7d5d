"""Where pycollect keeps files between runs: $PYCOLLECT_CACHE_DIR, else
$XDG_CACHE_HOME/pycollect, else ~/.cache/pycollect; one folder per kind of file (the
automatic-choice tables, tuning/table_cache.py; the torch backend compiled on first use,
torch_backend/builder.py). Everything there is rebuilt when missing: safe to delete."""
from __future__ import annotations

import os
from pathlib import Path


def directory(kind: str) -> Path:
    root = os.environ.get("PYCOLLECT_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "pycollect")
    return Path(root) / kind
