"""Spans -> Chrome trace JSON (the Trace Event Format that chrome://tracing and
ui.perfetto.dev open): one process per rank, one thread (track) per link direction
("send -> rank 1", "recv <- rank 3") and one for reductions ("reduce").

Each span is a complete event ("ph": "X") with "ts" and "dur" in microseconds since
the first event of the trace; its name says the part of the algorithm
("reduce-scatter s1 c2 seg0": step 1, chunk 2, segment 0), its category the phase, and
its args the bytes, the peer, the call, and when it was posted (posted_us, queued_us:
see spans.py). Metadata events ("ph": "M") name and order the processes and tracks.
"""
from __future__ import annotations

import json
from typing import Dict, List, Sequence, Tuple

from .spans import LEVELS, Span


def span_name(s: Span) -> str:
    parts = [s.phase, f"s{s.step}"]
    if s.chunk >= 0:
        parts.append(f"c{s.chunk}")
    if s.segment >= 0:
        parts.append(f"seg{s.segment}")
    return " ".join(parts)


def _track_order(track: str) -> Tuple[int, int, int]:
    """One-level tracks, then intra-host, then inter-host ones; sends, receives, reductions; by peer."""
    level, _, name = track.rpartition(": ")
    kind, _, peer = name.partition(" rank ")
    rank = int(peer) if peer else 0
    return (("", *LEVELS).index(level), {"send ->": 0, "recv <-": 1}.get(kind, 2), rank)


def chrome_events(spans: Sequence[Span], meta: Dict = None) -> Dict:
    """The trace as a dict ready for json.dump."""
    t0 = min((s.posted_ns for s in spans), default=0)
    events: List[Dict] = []
    tids: Dict[Tuple[int, str], int] = {}
    for rank in sorted({s.rank for s in spans}):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        tracks = sorted({s.track for s in spans if s.rank == rank}, key=_track_order)
        for i, track in enumerate(tracks, start=1):
            tids[(rank, track)] = i
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": i, "args": {"name": track}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": i, "args": {"sort_index": i}})
    for s in spans:
        events.append({
            "ph": "X", "name": span_name(s), "cat": s.phase, "pid": s.rank, "tid": tids[(s.rank, s.track)],
            "ts": (s.start_ns - t0) / 1000.0, "dur": (s.end_ns - s.start_ns) / 1000.0,
            "args": {"bytes": s.bytes, "peer": s.peer, "op": s.op, "seq": s.seq, "step": s.step, "chunk": s.chunk,
                     "segment": s.segment, "posted_us": (s.posted_ns - t0) / 1000.0,
                     "queued_us": s.queued_ns / 1000.0},
        })
    other = {"clock": "CLOCK_MONOTONIC", "t0_ns": t0}
    other.update(meta or {})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_chrome(spans: Sequence[Span], path: str, meta: Dict = None) -> str:
    """Write the trace to `path` (JSON); returns the path."""
    with open(path, "w") as f:
        json.dump(chrome_events(spans, meta), f)
    return path
