"""Which torch pycollect._torch (the native backend) was built against, and that module where
it was built against the torch this process runs.

The build writes the version beside the module (torch_build.txt, cmake/torch_backend.cmake).
A module built against another torch may not even load (or worse), so nothing imports
pycollect._torch without asking here first; torch_backend/native.py compiles a module for
the running torch where this one does not fit.
"""
from __future__ import annotations

import os
from typing import Optional

BUILD_FILE = "torch_build.txt"


def built_against() -> Optional[str]:
    """The torch version pycollect's backend was built against; None if it was built without."""
    from . import _C

    path = os.path.join(os.path.dirname(_C.__file__), BUILD_FILE)
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


def prebuilt(torch):
    """pycollect._torch if it was built against `torch` (the imported module), else None."""
    if built_against() != torch.__version__:
        return None
    from . import _torch

    return _torch
