"""A call bounded by our own deadline: the store steps of forming a group (formation.py)
and of explaining its failure (failures.py) run through it."""
from __future__ import annotations

import threading


def on_helper(name: str, fn, seconds: float) -> list:
    """fn() on a daemon thread, waited for up to `seconds`: [(True, what it returned)] or
    [(False, the exception it raised)], or [] while it still runs (a store client blocked
    on a silent store waits for the store's own timeout, not ours)."""
    outcome: list = []

    def body() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            outcome.append((False, e))

    helper = threading.Thread(target=body, name=name, daemon=True)
    helper.start()
    helper.join(seconds)
    return outcome