"""The flight recorder's files and their verdict.

Each group's engine keeps its last calls in a ring (csrc/trace/flight.h: sequence number,
op, sizes, dtype, algorithm, peer, state, the step it is in and the rank it waits for,
timestamps). When a call of the group fails, every rank that sees the failure writes its
ring, once, to PYCOLLECT_FLIGHT_DIR (default: a directory under the system's temp dir,
one per group), and the error names the file. `pycollect flight DIR` reads the files of
all ranks and says who is behind and where:

    group g3@0, all_reduce #418 (float32 x 1048576, ring):
      rank 2 never started it (its last call: all_reduce #417, done)
      ranks 0, 1 waited in reduce-scatter step 3/3 for rank 2 (then failed)
    culprit: rank 2

    dump(group, error)  -> the file written (None: already written, or unwritable)
    load(directory)     -> {group: {rank: record}}
    verdict(ranks)      -> (lines, culprit ranks) for one group's records
"""
from __future__ import annotations

import glob
import json
import os
import socket
import tempfile
import time
from typing import Dict, List, Optional, Tuple

VERSION = 1
ANY_PEER = -2  # a receive from any source (flight::kAnyPeer)
P2P_OP = "send/recv"


def directory(explicit: Optional[str], group_key: str) -> str:
    """Where a group's records go: PYCOLLECT_FLIGHT_DIR, else one directory per group
    (named by the group's rendezvous token, the same on every rank of one host)."""
    return explicit or os.path.join(tempfile.gettempdir(), f"pycollect-flight-{group_key}")


def dump(path_dir: str, group: str, rank: int, ranks: List[int], entries: List[dict], error: BaseException) -> str:
    """Write one rank's record; returns its path."""
    os.makedirs(path_dir, exist_ok=True)
    record = {"version": VERSION, "group": group, "rank": rank, "size": len(ranks), "ranks": list(ranks),
              "pid": os.getpid(), "host": socket.gethostname(), "written_us": int(time.time() * 1e6),
              "error_kind": type(error).__name__, "error": str(error), "entries": entries}
    path = os.path.join(path_dir, f"{group}-rank{rank}.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)  # a reader never sees half a file
    return path


def load(path_dir: str) -> Dict[str, Dict[int, dict]]:
    """Every record in `path_dir`: {group: {rank: record}}. Raises ValueError naming a file
    that is not a flight record."""
    if not os.path.isdir(path_dir):
        raise ValueError(f"{path_dir!r} is not a directory of flight records")
    groups: Dict[str, Dict[int, dict]] = {}
    for path in sorted(glob.glob(os.path.join(path_dir, "*-rank*.json"))):
        try:
            with open(path) as f:
                record = json.load(f)
            groups.setdefault(record["group"], {})[int(record["rank"])] = record
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path} is not a pycollect flight record: {e}") from None
    if not groups:
        raise ValueError(f"no flight records (*-rankN.json) in {path_dir!r}")
    return groups


def _ranks(rs: List[int]) -> str:
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(str(r) for r in rs)


def _call(e: dict) -> str:
    if e["op"] == P2P_OP:
        peer = "any rank" if e["peer"] == ANY_PEER else f"rank {e['peer']}"
        return f"{'send to' if e['send'] else 'recv from'} {peer} #{e['seq']} (tag {e['root']})"
    return f"{e['op']} #{e['seq']}"


def _where(e: dict) -> str:
    """Where a call that started is: its step, and whom it waits for."""
    at = f" in {e['phase']} step {e['step'] + 1}/{max(e['steps'], 1)}" if e["phase"] else ""
    on = e["waiting_on"]
    whom = "" if on == -1 else " for any rank" if on == ANY_PEER else f" for rank {on}"
    return at + whom


def _front(entries: List[dict]) -> Tuple[Optional[dict], Optional[dict]]:
    """(the first collective not done, the last one done) of one rank. Sends and receives
    (from any source too) are not in the collectives' order: they are listed apart."""
    coll = [e for e in entries if e["op"] != P2P_OP]
    front = next((e for e in coll if e["state"] != "done"), None)
    done = [e for e in coll if e["state"] == "done"]
    return front, (done[-1] if done else None)


LATE_S = 1.0  # a rank whose call failed this much after every other's was stalled meanwhile


def _most(ranks: List[int]) -> List[int]:
    return [max(set(ranks), key=ranks.count)] if ranks else []


def _stalled(ranks: Dict[int, dict], fronts: dict, seq: int) -> List[int]:
    """Every rank started call `seq`. The witnesses are the ranks that timed out: the rank
    they waited for (the others only saw their links close). Without one, the rank whose
    call failed last, more than LATE_S after all the others' (it was stopped or stuck
    meanwhile); else the rank most waited on."""
    witnessed = [fronts[r][0]["waiting_on"] for r in ranks
                 if ranks[r]["error_kind"] == "CollectiveTimeoutError" and fronts[r][0] is not None]
    if any(p >= 0 for p in witnessed):
        return _most([p for p in witnessed if p >= 0])
    at = [(fronts[r][0]["ended_us"], r) for r in ranks
          if fronts[r][0] is not None and fronts[r][0]["seq"] == seq and fronts[r][0]["ended_us"]]
    at.sort()
    if len(at) >= 2 and at[-1][0] - at[-2][0] > LATE_S * 1e6:
        return [at[-1][1]]
    on = [fronts[r][0]["waiting_on"] for r in ranks if fronts[r][0] is not None and fronts[r][0]["seq"] == seq]
    return _most([p for p in on if p >= 0])


def verdict(ranks: Dict[int, dict]) -> Tuple[List[str], List[int]]:
    """What one group's records say: lines to print, and the ranks found behind."""
    size = next(iter(ranks.values()))["size"]
    missing = [r for r in range(size) if r not in ranks]
    fronts = {r: _front(rec["entries"]) for r, rec in ranks.items()}
    pending = [f for f, _ in fronts.values() if f is not None]
    lines: List[str] = []
    culprits = list(missing)
    if pending:
        stuck = min(pending, key=lambda e: e["seq"])
        seq = stuck["seq"]
        head = f"{_call(stuck)} ({stuck['dtype']} x {stuck['count']}"
        lines.append(head + (f", {stuck['algo']})" if stuck["algo"] != "auto" else ")") + ":")
        waiting: Dict[str, List[int]] = {}
        for r in sorted(ranks):
            front, last = fronts[r]
            if front is not None and front["seq"] == seq:
                how = {"running": "wait", "failed": "waited", "queued": "queued it, not started:"}[front["state"]]
                tail = " (then failed)" if front["state"] == "failed" else ""
                waiting.setdefault(f"{how}{_where(front)}{tail}", []).append(r)
            elif front is not None:
                lines.append(f"  rank {r} finished it; then {_call(front)} {front['state']}{_where(front)}")
            elif last is None or last["seq"] < seq:
                was = f"its last call: {_call(last)}, done" if last else "it made no call in this group"
                lines.append(f"  rank {r} never started it ({was})")
                culprits.append(r)
        for how, rs in waiting.items():
            lines.append(f"  {_ranks(rs)} {how}")
        starts = {r: fronts[r][0]["started_us"] for r in ranks
                  if fronts[r][0] is not None and fronts[r][0]["seq"] == seq and fronts[r][0]["started_us"]}
        for r, at in sorted(starts.items()):
            late = (at - min(starts.values())) / 1e6
            if late > LATE_S:
                lines.append(f"  rank {r} started it {late:.1f} s after the first rank did")
    else:
        lines.append("no collective call was pending on any rank that wrote a record")
    p2p = [(r, e) for r, rec in sorted(ranks.items()) for e in rec["entries"]
           if e["op"] == P2P_OP and e["state"] != "done"]
    for r, e in p2p[:8]:
        lines.append(f"  rank {r}: {_call(e)} {e['state']}")
    if missing:
        lines.append(f"  {_ranks(missing)} wrote no record: stopped, killed or cut off (or never saw the failure)")
    if not culprits and pending:
        culprits = _stalled(ranks, fronts, seq)
    lines.append(f"culprit: {_ranks(sorted(set(culprits)))}" if culprits else "culprit: unknown")
    return lines, sorted(set(culprits))


def report(path_dir: str) -> List[str]:
    """The verdict on every group with records in `path_dir`, with each rank's error."""
    out: List[str] = []
    for group, ranks in sorted(load(path_dir).items()):
        lines, _ = verdict(ranks)
        out.append(f"group {group}, {lines[0]}")
        out.extend(lines[1:])
        for r in sorted(ranks):
            out.append(f"    rank {r} raised {ranks[r]['error_kind']}: {ranks[r]['error'][:300]}")
    return out
