"""The torch backend compiled on first use, against the torch this process runs.

pycollect._torch is a C++ c10d::Backend, so it must be compiled against the torch it runs
with: torch's headers, the pybind11 torch bundles, torch's C++ ABI. `pip install
--no-build-isolation .` builds it with the package (cmake/torch_backend.cmake). Everywhere
else (a plain `pip install .`, whose isolated build has no torch; a wheel made without
torch; torch upgraded since) the first "pycollect" group compiles it here, from the sources
installed with the package (pycollect/_csrc): one translation unit that includes every
source file (torch's headers are parsed once), about half a minute on two cores, with one
line of progress. The module is kept in a cache, keyed by everything the binary depends on
(torch's version, location and C++ ABI, the Python ABI, a digest of the sources); later
processes load it from there. Processes that start together (torchrun's ranks) queue on
one lock file while the first of them compiles.

The cache: pycollect's (cache.py: $PYCOLLECT_CACHE_DIR, else ~/.cache/pycollect), torch-backend/.
PYCOLLECT_BUILD_TORCH_BACKEND=0 turns the first-use build off: loading then fails, naming
the command that builds the backend with the package.
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import time

from .. import cache

REBUILD = "pip install --no-build-isolation --force-reinstall --no-deps <pycollect's source directory>"
SWITCH = "PYCOLLECT_BUILD_TORCH_BACKEND"
SWITCH_DEFAULT = 1  # compile on first use unless the switch says 0
MODULE = "pycollect._torch"


def source_dir() -> str:
    """The backend's sources and the engine's headers, as installed with the package."""
    from .. import _C

    return os.path.join(os.path.dirname(_C.__file__), "_csrc")


def _torch_paths(torch) -> tuple[str, str]:
    base = os.path.dirname(torch.__file__)
    return os.path.join(base, "include"), os.path.join(base, "lib")


def build_key(torch, src: str) -> str:
    """The cache entry's name: torch's version, then a digest of everything else the
    binary depends on (a changed source or header, another torch install of the same
    version, another Python, another ABI: another entry). The engine library it links is
    described by its headers: what changes behind them does not change the module."""
    h = hashlib.sha256()
    for part in (torch.__version__, os.path.dirname(torch.__file__),
                 str(int(torch._C._GLIBCXX_USE_CXX11_ABI)), sysconfig.get_config_var("EXT_SUFFIX") or ""):
        h.update(part.encode() + b"\0")
    for folder, dirs, files in sorted(os.walk(src)):
        dirs.sort()
        for name in sorted(files):
            if name.endswith((".cc", ".h")):
                path = os.path.join(folder, name)
                h.update(os.path.relpath(path, src).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(f.read())
    return f"torch-{torch.__version__}-{h.hexdigest()[:16]}"


def compiler() -> str:
    """$CXX, else the first C++ compiler on PATH; ImportError naming both if none."""
    named = os.environ.get("CXX")
    if named:
        found = shutil.which(named)
        if found is None:
            raise ImportError(f"pycollect must compile its torch backend for this torch, but CXX={named!r} is "
                              f"not an executable; set CXX to a C++17 compiler, or install pycollect with torch "
                              f"present: {REBUILD}")
        return found
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    raise ImportError("pycollect must compile its torch backend for this torch, and no C++ compiler was found "
                      f"(c++, g++ or clang++ on PATH, or $CXX); install one, or install pycollect with torch "
                      f"present: {REBUILD}")


def command(cxx: str, torch, src: str, unity: str, out: str) -> list[str]:
    """The compile-and-link line; the flags are cmake/torch_backend.cmake's."""
    from .. import _C

    include, lib = _torch_paths(torch)
    engine = os.path.join(os.path.dirname(_C.__file__), "libpycollect_engine.so")
    return [cxx, "-std=c++17", "-O2", "-DNDEBUG", "-fPIC", "-shared", "-w",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            "-DTORCH_EXTENSION_NAME=_torch", "-DTORCH_API_INCLUDE_EXTENSION_H",
            f'-DPYCOLLECT_TORCH_VERSION="{torch.__version__}"',
            # torch's include directories first: its bundled pybind11.
            f"-I{include}", f"-I{os.path.join(include, 'torch', 'csrc', 'api', 'include')}", f"-I{src}",
            f"-I{sysconfig.get_paths()['include']}",
            unity, "-o", out, engine, f"-L{lib}", "-ltorch", "-ltorch_cpu", "-ltorch_python", "-lc10",
            f"-Wl,-rpath,{lib}", f"-Wl,-rpath,{os.path.dirname(engine)}"]


def _check_buildable(torch, src: str, why: str) -> None:
    from .. import _C

    if os.environ.get(SWITCH, str(SWITCH_DEFAULT)).strip() == "0":
        raise ImportError(f"{why}, this process runs torch {torch.__version__}, and {SWITCH}=0 forbids "
                          f"compiling the backend on first use; build it with the package, torch present: {REBUILD} "
                          "(the engine API, pycollect.all_reduce and the rest, works as it is)")
    if not os.path.isdir(os.path.join(src, "torch_backend")):
        raise ImportError(f"this installation of pycollect carries no sources for its torch backend ({src}); "
                          f"reinstall it: {REBUILD}")
    if int(torch._C._GLIBCXX_USE_CXX11_ABI) != int(_C.CXX11_ABI):
        raise ImportError(f"pycollect's engine was built with _GLIBCXX_USE_CXX11_ABI={_C.CXX11_ABI} and torch "
                          f"{torch.__version__} uses {int(torch._C._GLIBCXX_USE_CXX11_ABI)}: the backend cannot join "
                          f"them; build pycollect with this torch present: {REBUILD}")
    if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        raise ImportError(f"pycollect must compile its torch backend, and Python's headers are missing "
                          f"({sysconfig.get_paths()['include']}/Python.h); install them (python3-dev), or install "
                          f"pycollect with torch present: {REBUILD}")


def _compile(torch, src: str, entry: str, name: str, why: str) -> None:
    """Compiles the module `name` into a fresh directory beside `entry`, then renames it into
    place: a reader sees a whole module or none."""
    cxx = compiler()
    work = f"{entry}.tmp{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    unity = os.path.join(work, "torch_backend.cc")
    with open(unity, "w") as f:
        for source in sorted(os.listdir(os.path.join(src, "torch_backend"))):
            if source.endswith(".cc"):
                f.write(f'#include "torch_backend/{source}"\n')
    out = os.path.join(work, name)
    sys.stderr.write(f"pycollect: compiling its torch backend for torch {torch.__version__} ({why}; once, "
                     f"about a minute; cached in {os.path.dirname(entry)}) ...")
    sys.stderr.flush()
    start = time.monotonic()
    done = subprocess.run(command(cxx, torch, src, unity, out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    if done.returncode != 0:
        log = f"{entry}.failed.log"
        with open(log, "w") as f:
            f.write(" ".join(done.args) + "\n\n" + done.stdout)
        shutil.rmtree(work, ignore_errors=True)
        sys.stderr.write(" failed\n")
        tail = "\n".join(done.stdout.splitlines()[-25:])
        raise ImportError(f"compiling pycollect's torch backend failed ({cxx}; the whole log: {log}):\n{tail}")
    shutil.rmtree(entry, ignore_errors=True)  # an entry without its module (emptied by hand): replaced
    os.rename(work, entry)
    sys.stderr.write(f" done in {time.monotonic() - start:.0f} s\n")


def module_path(torch, why: str) -> str:
    """The compiled module for the running torch: from the cache, or compiled into it now."""
    src = source_dir()
    _check_buildable(torch, src, why)
    root = str(cache.directory("torch-backend"))
    entry = os.path.join(root, build_key(torch, src))
    name = "_torch" + sysconfig.get_config_var("EXT_SUFFIX")
    path = os.path.join(entry, name)
    if os.path.exists(path):
        return path
    try:
        os.makedirs(root, exist_ok=True)
        lock = open(f"{entry}.lock", "w")
    except OSError as e:
        raise ImportError(f"pycollect must compile its torch backend and cannot write its cache ({root}: "
                          f"{e.strerror}); point PYCOLLECT_CACHE_DIR at a writable directory") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be compiling it: wait for it
        if not os.path.exists(path):
            _compile(torch, src, entry, name, why)
    return path


def load(torch, why: str):
    """pycollect._torch from the cache (compiled first if need be), imported as the
    package's own would be."""
    path = module_path(torch, why)
    loader = importlib.machinery.ExtensionFileLoader(MODULE, path)
    spec = importlib.util.spec_from_file_location(MODULE, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[MODULE] = module
    return module
