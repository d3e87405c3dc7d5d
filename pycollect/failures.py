"""What a group's ranks tell each other when it fails, and what each leaves behind.

A rank that sees its group fail publishes its failure in the store, once (the first one
it saw is the root of the others), and a rank that only saw a neighbour go away reads
why from the others' reports (a mismatch or a timeout two ranks away), or learns which
ranks never reported. Before that it writes the flight recorder's ring (flight.py), and
the error it raises names the file.
"""
from __future__ import annotations

import json
import os
import time
from typing import Dict, List, Optional

from . import flight
from ._bounded import on_helper
from .errors import CollectiveTimeoutError, DeviceError, GroupFailedError, MismatchError, PeerLostError, PyCollectError

# Kinds of failure that explain a neighbour's PeerLostError: the rank that saw one of these
# closed its links on purpose, and its neighbours only saw the links close.
_ROOT_CAUSES = {"MismatchError": MismatchError, "CollectiveTimeoutError": CollectiveTimeoutError,
                "DeviceError": DeviceError}


class Failures:
    """One rank's side of a formed group's failure reports: `keys` is where the group's
    formation keeps its keys in the store (formation.Formation.keys), `scope` and `token`
    name its flight records and their directory, `comm` holds the flight recorder's ring."""

    def __init__(self, store, keys: str, scope: str, token: int, rank: int, ranks: List[int],
                 flight_dir: Optional[str], comm):
        self.rank = rank
        self.ranks = ranks
        self.size = len(ranks)
        self._store = store
        self._keys = keys
        self._scope = scope
        self._token = token
        self._flight_dir = flight_dir
        self._comm = comm
        self._published = False   # this rank's failure is in the store
        self._store_silent = False  # the store did not answer while explaining a failure
        self._flight_path: Optional[str] = None  # this rank's flight record, once written

    def explain(self, error: PyCollectError, wait_s: float = 1.5) -> PyCollectError:
        """Publish this rank's failure as {kind, message} in the store (once: the first one
        seen is the root of the others) and, for a lost peer, add what the other ranks
        reported: a rank that only saw a neighbour go away learns why (a mismatch or a
        timeout two ranks away), or which ranks never reported and so probably died.

        The store may be unreachable (its host is the one that failed, or a cut cable is
        between us), and its client would then wait for the store's own timeout: so the
        exchange runs on a helper thread and gets `wait_s` + 1 s, after which the error
        is raised as it is, and the store is not asked again for this group.

        This rank's flight record is written first (once per group) and named at the end."""
        flown = self._record_flight(error)
        explained = self._explained(error, wait_s)
        return type(explained)(f"{explained}{flown}") if flown else explained

    def _explained(self, error: PyCollectError, wait_s: float) -> PyCollectError:
        if self._store_silent:
            return error
        outcome = on_helper(f"pycollect-explain-{self._scope}", lambda: self._explain_now(error, wait_s),
                            wait_s + 1.0)
        if outcome and outcome[0][0]:  # (one that raised is as silent as one that hangs)
            return outcome[0][1]
        self._store_silent = True
        return type(error)(f"{error}; the rendezvous store did not answer within {wait_s + 1.0:.1f} s, "
                           "so what the other ranks saw is unknown")

    def _record_flight(self, error: PyCollectError) -> str:
        """Write the flight recorder's ring (pycollect/flight.py) the first time the group
        fails here; what to add to the error: the file, and how to read them all."""
        if self._flight_path is None:
            where = flight.directory(self._flight_dir, f"{self._token:016x}")
            try:
                self._flight_path = flight.dump(where, self._scope, self.rank, self.ranks,
                                                self._comm.flight_record(), error)
            except OSError as e:
                self._flight_path = ""
                return f"; the flight record could not be written to {where}: {e}"
        if not self._flight_path:
            return ""
        return (f"; flight record: {self._flight_path} (`pycollect flight {os.path.dirname(self._flight_path)}` "
                "reads every rank's)")

    def _explain_now(self, error: PyCollectError, wait_s: float) -> PyCollectError:
        if not self._publish(error) or not isinstance(error, PeerLostError) or self.size <= 1:
            return error
        reports = self._reports(wait_s)
        causes = [(kind, m) for kind, m in reports.values() if kind in _ROOT_CAUSES]
        silent = [r for r in range(self.size) if r != self.rank and r not in reports]
        extra = []
        if causes:
            extra.append("root cause reported by another rank: " + causes[0][1])
        if silent:
            extra.append(f"rank(s) {silent} reported nothing (lost, or not in this call)")
        if not extra:
            return error
        kind = MismatchError if causes and causes[0][0] == "MismatchError" else type(error)
        return kind(str(error) + "; " + "; ".join(extra))

    def _publish(self, error: PyCollectError) -> bool:
        """False when the store is unreachable (it may be gone with rank 0; the local error stands)."""
        if self._published:
            return True
        kind = "GroupFailedError" if isinstance(error, GroupFailedError) else type(error).__name__
        try:
            self._store.set(f"{self._keys}/failed/{self.rank}", json.dumps({"kind": kind, "message": str(error)}))
        except Exception:
            return False
        self._published = True
        return True

    def _reports(self, wait_s: float) -> Dict[int, tuple]:
        """rank -> (kind, message) of the other ranks' published failures, waiting up to
        `wait_s` for a root cause or for every rank to report."""
        reports: Dict[int, tuple] = {}
        deadline = time.monotonic() + wait_s
        while True:
            for r in range(self.size):
                if r == self.rank or r in reports:
                    continue
                key = f"{self._keys}/failed/{r}"
                try:
                    if self._store.check([key]):
                        report = json.loads(self._store.get(key).decode(errors="replace"))
                        reports[r] = (report["kind"], report["message"])
                except Exception:
                    return reports
            if (any(kind in _ROOT_CAUSES for kind, _ in reports.values()) or len(reports) == self.size - 1
                    or time.monotonic() > deadline):
                return reports
            time.sleep(0.05)
