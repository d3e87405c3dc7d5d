"""Which modules become sharding units, and which parameters each unit owns.

A policy looks at each module bottom-up (children before their parent) and says
whether it becomes a unit, given the number of parameters it would own: those of its
subtree that no unit below it has taken. The root is always a unit and takes whatever
is left. A parameter reachable from two different units (weights tied across units)
is refused: every parameter must live in exactly one flat shard. Ties inside one unit
(e.g. an embedding and an output head both in the root) are fine.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple, Type, Union

import torch.nn as nn


class ModuleWrapPolicy:
    """Make a unit of every module that is an instance of one of `module_classes`."""

    def __init__(self, module_classes: Iterable[Type[nn.Module]]):
        self.module_classes = tuple(module_classes)
        if not all(isinstance(c, type) and issubclass(c, nn.Module) for c in self.module_classes):
            raise TypeError(f"ModuleWrapPolicy takes nn.Module subclasses, got {self.module_classes!r}")

    def __call__(self, module: nn.Module, name: str, unowned_numel: int) -> bool:
        return isinstance(module, self.module_classes)

    def __repr__(self) -> str:
        return f"ModuleWrapPolicy({[c.__name__ for c in self.module_classes]})"


class SizeWrapPolicy:
    """Make a unit of every module that would own at least `min_num_params` parameters."""

    def __init__(self, min_num_params: int):
        if min_num_params < 1:
            raise ValueError(f"SizeWrapPolicy(min_num_params={min_num_params}) must be >= 1")
        self.min_num_params = int(min_num_params)

    def __call__(self, module: nn.Module, name: str, unowned_numel: int) -> bool:
        return unowned_numel >= self.min_num_params

    def __repr__(self) -> str:
        return f"SizeWrapPolicy({self.min_num_params})"


Policy = Union[None, ModuleWrapPolicy, SizeWrapPolicy, Callable[[nn.Module, str, int], bool]]


@dataclass
class ParamRef:
    """One distinct parameter of a unit and every (module, attribute, name) that holds it."""

    param: nn.Parameter
    holders: List[Tuple[nn.Module, str, str]] = field(default_factory=list)


@dataclass
class UnitPlan:
    name: str  # "" for the root
    module: nn.Module
    params: List[ParamRef]


def plan_units(root: nn.Module, policy: Policy = None) -> List[UnitPlan]:
    """The units of `root` in pre-order (root first), each with the parameters it owns."""
    policy = policy or (lambda module, name, numel: False)
    modules = dict(root.named_modules(remove_duplicate=False))
    names_of: Dict[int, str] = {}
    for name, module in modules.items():
        names_of.setdefault(id(module), name)
    chosen = set()  # ids of modules that are units

    def visit(name: str, module: nn.Module) -> set:
        """Ids of the parameters in this subtree not yet owned by a unit below."""
        unowned = {id(p) for p in module.parameters(recurse=False)}
        for child_name, child in module.named_children():
            unowned |= visit(f"{name}.{child_name}" if name else child_name, child)
        if module is not root and id(module) not in chosen and unowned:
            numel = sum(p.numel() for p in module.parameters() if id(p) in unowned)
            if policy(module, name, numel):
                chosen.add(id(module))
                return set()
        return unowned

    visit("", root)
    units = [m for name, m in root.named_modules() if m is root or id(m) in chosen]
    owner_of = _owners(root, chosen)
    plans = []
    for unit in units:
        refs: Dict[int, ParamRef] = {}
        for holder_name, holder in root.named_modules(remove_duplicate=False):
            for attr, p in list(holder._parameters.items()):
                if p is None or owner_of.get((id(holder), attr)) is not unit:
                    continue
                fqn = f"{holder_name}.{attr}" if holder_name else attr
                refs.setdefault(id(p), ParamRef(p)).holders.append((holder, attr, fqn))
        plans.append(UnitPlan(names_of[id(unit)], unit, list(refs.values())))
    _check_no_sharing(plans)
    return plans


def _owners(root: nn.Module, chosen: set) -> Dict[Tuple[int, str], nn.Module]:
    """(id(holder module), attribute) -> the nearest unit at or above the holder."""
    owner: Dict[Tuple[int, str], nn.Module] = {}

    def walk(module: nn.Module, unit: nn.Module):
        if id(module) in chosen:
            unit = module
        for attr, p in module._parameters.items():
            if p is not None:
                owner[(id(module), attr)] = unit
        for child in module.children():
            walk(child, unit)

    walk(root, root)
    return owner


def _check_no_sharing(plans: List[UnitPlan]) -> None:
    seen: Dict[int, Tuple[str, str]] = {}
    for plan in plans:
        for ref in plan.params:
            fqn = ref.holders[0][2]
            other = seen.get(id(ref.param))
            if other is not None:
                raise ValueError(
                    f"parameter {fqn!r} (unit {plan.name or '<root>'!r}) is the same tensor as {other[1]!r} "
                    f"(unit {other[0] or '<root>'!r}): a parameter shared across units cannot live in one "
                    "shard; put both holders in one unit (e.g. leave the tied embedding and head to the root)")
            seen[id(ref.param)] = (plan.name, fqn)


def as_policy(policy: Policy) -> Optional[Callable]:
    if policy is None or callable(policy):
        return policy
    raise TypeError(f"wrap policy must be a ModuleWrapPolicy, SizeWrapPolicy or callable, got {type(policy).__name__}")
