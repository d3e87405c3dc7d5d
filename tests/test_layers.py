"""The layers contract: no module of pycollect imports one above it.

pycollect's packages and modules are stacked in LAYERS, top first (docs/architecture.md
draws the same stack). A module may import from its own unit (its package or module)
and from any unit in a lower layer; units that share a layer are independent and do
not import each other. Every import counts, a function-level one too: a lazy import
is still a dependency, only a later one. The package's own __init__ (the facade that
re-exports the API and registers the torch backend) may import anything, and nothing
imports it back. The test reads the source, so it runs in milliseconds and fails with
the offending file, line and the two layers.
"""
from __future__ import annotations

import ast
import os
from typing import Dict, List, Tuple

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pycollect")

LAYERS: List[List[str]] = [
    ["__main__"],                              # python -m pycollect
    ["cli"],                                   # argparse and printing
    ["demo"],                                  # the lesson's jobs
    ["pp"],                                    # pipeline parallelism (its stages are FSDP units)
    ["ddp", "fsdp", "tp", "mesh", "hooks"],    # training wrappers; DDP comm hooks
    ["memory"],                                # the memory planner
    ["costmodel", "trace", "benchmark"],       # study tools: fitting, tracing, measuring
    ["measuring", "launch", "torch_backend"],  # what the study tools share; local ranks; torch's backend
    ["_sync", "netns"],                        # cross-rank helpers; network-namespace hosts
    ["api"],                                   # init_process_group, all_reduce, ...
    ["rendezvous", "world"],                   # finding the store; this process's groups, and a fork
    ["group"],                                 # ProcessGroup: owns one C++ Communicator, issues the calls
    ["formation", "failures", "shrink"],       # the ranks meet and connect; what they report when it fails; survivors agree
    ["work", "_device", "flight", "topology"],  # ...; the flight recorder's files; hosts
    ["options"],
    ["tuning"],                                # what the engine needs of the cost model at run time
    ["_buffers", "errors", "_bounded", "compression"],  # ...; a call bound by our own deadline; compress='s bound
    ["_torch_build"],                          # whether the built _torch fits the running torch
    ["types", "_C", "_torch", "launcher", "dirstore", "cache"],  # enums; the extensions, the doors into C++ (_torch: torch's backend); the launcher's env; a store without torch; where files are kept between runs
]


def _layer_of() -> Dict[str, int]:
    return {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def _module_name(path: str, root: str = ROOT) -> Tuple[str, bool]:
    rel = os.path.relpath(path, os.path.dirname(root))[:-3].replace(os.sep, ".")
    is_pkg = rel.endswith(".__init__")
    return (rel[:-len(".__init__")] if is_pkg else rel), is_pkg


def imports_of(path: str, root: str = ROOT) -> List[Tuple[int, str]]:
    """(line, absolute module name) of every pycollect import in the file at `path`."""
    name, is_pkg = _module_name(path, root)
    package = name if is_pkg else name.rsplit(".", 1)[0]
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                if node.module:
                    found.append((node.lineno, f"{base}.{node.module}"))
                else:  # from . import x, y: each name may be a module
                    found.extend((node.lineno, f"{base}.{a.name}") for a in node.names)
            elif node.module and (node.module == "pycollect" or node.module.startswith("pycollect.")):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names
                         if a.name == "pycollect" or a.name.startswith("pycollect."))
    return found


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""  # "": the package itself (its __init__)


def violations(root: str = ROOT) -> List[str]:
    layer = _layer_of()
    out = []
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            name, _ = _module_name(path, root)
            here = _unit(name)
            if here == "":
                continue  # the facade
            if here not in layer:
                out.append(f"{path}: pycollect.{here} is in no layer of tests/test_layers.py")
                continue
            for line, target in imports_of(path, root):
                there = _unit(target)
                if there == here:
                    continue
                where = f"{os.path.relpath(path, os.path.dirname(root))}:{line}"
                if there == "":
                    out.append(f"{where}: pycollect.{here} imports the package facade (pycollect/__init__.py); "
                               "import the module it re-exports instead")
                elif there not in layer:
                    out.append(f"{where}: imports pycollect.{there}, which is in no layer")
                elif layer[there] < layer[here]:
                    out.append(f"{where}: pycollect.{here} (layer {layer[here]}) imports pycollect.{there}, "
                               f"a layer above it ({layer[there]})")
                elif layer[there] == layer[here]:
                    out.append(f"{where}: pycollect.{here} imports pycollect.{there}, its sibling in layer "
                               f"{layer[here]} (siblings are independent)")
    return out


def test_no_module_imports_one_above_it():
    assert violations() == [], "\n".join(violations())


def _units(root: str = ROOT) -> set:
    """Every module and package directly in pycollect/ (the extension by its .so name)."""
    out = set()
    for f in os.listdir(root):
        if os.path.isfile(os.path.join(root, f, "__init__.py")):
            out.add(f)
        elif f.endswith(".py") and f != "__init__.py":
            out.add(f[:-3])
        elif f.endswith((".so", ".pyi")):
            out.add(f.split(".")[0])
    return out


def test_every_unit_has_a_layer():
    missing = sorted(_units() - set(_layer_of()))
    stale = sorted(set(_layer_of()) - _units())
    assert not missing and not stale, f"units without a layer: {missing}; layers naming no unit: {stale}"


def test_the_contract_catches_an_upward_import(tmp_path):
    """The checker itself: an engine module that imports a study tool is reported."""
    pkg = tmp_path / "pycollect"
    (pkg / "costmodel").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import api\n")
    (pkg / "costmodel" / "__init__.py").write_text("")
    (pkg / "group.py").write_text("def f():\n    from .costmodel import x\n")
    (pkg / "api.py").write_text("from . import group\nimport pycollect\n")
    found = violations(str(pkg))
    assert any("group.py:2" in v and "pycollect.group" in v and "layer above" in v for v in found), found
    assert any("api.py:2" in v and "facade" in v for v in found), found
    assert not any("api.py:1" in v for v in found), found


# -- the C++ side: the same rule, by directory, read from the #include lines ------------
CSRC = os.path.join(os.path.dirname(ROOT), "csrc")

CPP_LAYERS: List[List[str]] = [
    ["bindings", "torch_backend"],         # pybind11 doors from Python: the engine's; torch's backend (c10d)
    ["comm"],                              # Communicator: queue, worker, staging
    ["collectives"],                       # the algorithms, one file each
    ["transport/factory"],                 # the one place that knows the implementations
    ["transport/mesh"],                    # TCP mesh + per-link shared-memory upgrade
    ["transport/shm", "transport/tcp"],    # the two link kinds, independent of each other
    ["transport"],                         # the interfaces: Transport, Link, RangeQueue, waits
    ["reduce", "device"],                  # reduction kernels; host / CUDA devices
    ["trace"],
    ["common"],
]


def _cpp_unit(rel: str) -> str:
    parts = rel.replace(os.sep, "/").split("/")
    if parts[0] == "transport":
        if len(parts) > 2:
            return "transport/" + parts[1]
        if parts[1].startswith("factory."):
            return "transport/factory"
    return parts[0]


def cpp_violations(root: str = CSRC) -> List[str]:
    layer = {unit: i for i, units in enumerate(CPP_LAYERS) for unit in units}
    out = []
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith((".h", ".cc")):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, root)
            here = _cpp_unit(rel)
            if here not in layer:
                out.append(f"csrc/{rel}: {here} is in no layer of CPP_LAYERS")
                continue
            with open(path) as fh:
                for line_no, line in enumerate(fh, 1):
                    if not line.startswith('#include "'):
                        continue
                    target = line.split('"')[1]
                    there = _cpp_unit(target)
                    if there == here:
                        continue
                    if there not in layer:
                        out.append(f"csrc/{rel}:{line_no}: includes {target}, in no layer")
                    elif layer[there] < layer[here]:
                        out.append(f"csrc/{rel}:{line_no}: {here} includes {target} ({there}), a layer above it")
                    elif layer[there] == layer[here]:
                        out.append(f"csrc/{rel}:{line_no}: {here} includes {target} ({there}), its sibling")
    return out


def test_cpp_includes_point_down():
    assert cpp_violations() == [], "\n".join(cpp_violations())


def test_cpp_contract_catches_an_upward_include(tmp_path):
    (tmp_path / "transport" / "shm").mkdir(parents=True)
    (tmp_path / "transport" / "tcp").mkdir()
    (tmp_path / "transport" / "shm" / "link.h").write_text('#include "transport/tcp/link.h"\n#include "common/error.h"\n')
    (tmp_path / "transport" / "tcp" / "link.h").write_text('#include "comm/communicator.h"\n')
    found = cpp_violations(str(tmp_path))
    assert any("shm/link.h:1" in v and "sibling" in v for v in found), found
    assert any("tcp/link.h:1" in v and "a layer above" in v for v in found), found
    assert not any("shm/link.h:2" in v for v in found), found
