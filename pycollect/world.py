"""This process's groups: the default group, every group made or registered since, the
store they meet in, this process's global rank and listen address, and what a fork does
to them. api.py's public functions (init_process_group, new_group, destroy_process_group,
...) change this state; every call finds its group through default() and resolve()."""
from __future__ import annotations

import os
from typing import List, Optional

from .errors import NotInitializedError
from .group import NON_GROUP_MEMBER, ProcessGroup

default_group: Optional[ProcessGroup] = None  # init_process_group's
groups: List[ProcessGroup] = []  # every live group: the default one, new_group's, registered ones
group_seq = 0  # groups created so far on every rank (names g0, g1, ...)
store = None
host: Optional[str] = None  # the address this process's groups listen on
global_rank = -1


def default() -> ProcessGroup:
    if default_group is None:
        raise NotInitializedError("pycollect is not initialized: call pycollect.init_process_group() first")
    return default_group


def resolve(group) -> ProcessGroup:
    """The live group a call's group= names (None: the default group)."""
    if group is None:
        return default()
    if group is NON_GROUP_MEMBER:
        raise ValueError("this rank is not a member of the group passed to this call")
    if not isinstance(group, ProcessGroup):
        raise TypeError(f"group must be a pycollect ProcessGroup (from new_group), got {type(group).__name__}")
    if group not in groups:
        raise ValueError(f"{group!r} was destroyed")
    return group


def _keep_inherited_alive() -> None:
    """In a forked child: the parent's groups and store came along, their threads did not.
    Their destructors would join those threads (our workers, torch's store server) and
    hang, so each gets one reference that is never released. The groups themselves refuse
    every call in the child with an error that says why (the engine checks the pid), and
    destroy_process_group there only forgets them."""
    import ctypes

    for obj in (store, *groups):
        if obj is not None:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


os.register_at_fork(after_in_child=_keep_inherited_alive)
