"""Engine events -> spans: one per transfer on a link direction, one per reduction.

Each direction of a link is a FIFO (csrc/transport/link.h), so the k-th "posted" of a
(rank, direction, peer) completes with the k-th "done" of the same key, and the k-th
send of rank A to rank B is the k-th receive of B from A. A transfer is drawn from when
it could move to when it completed: from its post, or from when the one before it on the
same link direction finished, whichever is later, and for a receive not before the
sender's span of it began (receives are posted ahead of time and wait for their data;
that wait is `queued_ns`, not transfer). So spans of one track never overlap, and each
is one segment on the wire. All ranks stamp CLOCK_MONOTONIC, so the ranks compare.
"""
from __future__ import annotations

from collections import defaultdict
from operator import attrgetter
from typing import Dict, Iterable, List, NamedTuple, Tuple

from ..types import TraceEvent

_DIRECTION = {"send_posted": "send", "send_done": "send", "recv_posted": "recv", "recv_done": "recv"}


class Span(NamedTuple):
    """One transfer or reduction of one rank, from `start_ns` to `end_ns`. `event` is the
    event that opened it (a posted send or recv, a reduce's start): the span reads its
    call, place and size from it (EVENT_FIELDS: span.op, span.seq, span.phase, span.step,
    span.chunk, span.segment, span.peer (-1 for reduce), span.bytes) and posted_ns, when
    the algorithm queued it (= start_ns for reduce), is its time."""
    rank: int
    kind: str        # "send", "recv" or "reduce"
    start_ns: int    # max(posted, previous transfer's end) for transfers; start for reduce
    end_ns: int
    event: TraceEvent

    @property
    def queued_ns(self) -> int:
        return self.start_ns - self.posted_ns

    @property
    def level(self) -> str:
        """A hierarchical algorithm's level ("intra-host", "inter-host": the phase's first word,
        csrc Context views), or "" for one-level algorithms."""
        head = self.phase.split(" ", 1)[0]
        return head if head in LEVELS else ""

    @property
    def track(self) -> str:
        """The Chrome track: one per link direction, one for reductions; a hierarchical
        algorithm's intra- and inter-host phases on tracks of their own ("inter-host: send ->
        rank 2")."""
        if self.kind == "send":
            name = f"send -> rank {self.peer}"
        elif self.kind == "recv":
            name = f"recv <- rank {self.peer}"
        else:
            name = "reduce"
        return f"{self.level}: {name}" if self.level else name


LEVELS = ("intra-host", "inter-host")
EVENT_FIELDS = ("op", "seq", "phase", "step", "chunk", "segment", "peer", "bytes")
for _name in EVENT_FIELDS:
    setattr(Span, _name, property(attrgetter(f"event.{_name}")))
Span.posted_ns = property(attrgetter("event.ns"))

def to_spans(events: Iterable) -> List[Span]:
    """Spans of pycollect.TraceEvent (any ranks, any order within a rank kept); raises
    ValueError if a rank's events do not pair up (a posted without its done)."""
    by_rank: Dict[int, list] = defaultdict(list)
    for e in events:
        by_rank[e.rank].append(e)
    spans: List[Span] = []
    for rank in sorted(by_rank):
        spans.extend(_rank_spans(rank, by_rank[rank]))
    return _after_sends(spans)


def _after_sends(spans: List[Span]) -> List[Span]:
    """Start each receive no earlier than the sender's span of the same bytes (when the
    link's sends and receives pair up; a partial trace is left as it is)."""
    lanes: Dict[Tuple[str, int, int], List[int]] = defaultdict(list)  # (kind, from, to) -> span indices
    for i, s in enumerate(spans):
        if s.kind == "send":
            lanes[("send", s.rank, s.peer)].append(i)
        elif s.kind == "recv":
            lanes[("recv", s.peer, s.rank)].append(i)
    out = list(spans)
    for (kind, src, dst), recvs in lanes.items():
        sends = lanes.get(("send", src, dst), [])
        if kind != "recv" or len(sends) != len(recvs):
            continue
        for si, ri in zip(sends, recvs):
            r = out[ri]
            start = min(max(r.start_ns, spans[si].start_ns), r.end_ns)
            out[ri] = r._replace(start_ns=start)
    return out


def _rank_spans(rank: int, events: list) -> List[Span]:
    posted: Dict[Tuple[str, int], list] = defaultdict(list)
    done: Dict[Tuple[str, int], list] = defaultdict(list)
    reduce_start = None
    out: List[Span] = []
    for e in events:
        if e.type in ("send_posted", "recv_posted"):
            posted[(_DIRECTION[e.type], e.peer)].append(e)
        elif e.type in ("send_done", "recv_done"):
            done[(_DIRECTION[e.type], e.peer)].append(e)
        elif e.type == "reduce_start":
            reduce_start = e
        elif e.type == "reduce_end":
            if reduce_start is None:
                raise ValueError(f"rank {rank}: a reduce_end without its reduce_start")
            out.append(_span(rank, "reduce", reduce_start, reduce_start.ns, e.ns))
            reduce_start = None
    for key, posts in posted.items():
        dones = done.get(key, [])
        if len(dones) != len(posts):
            raise ValueError(f"rank {rank}: {len(posts)} {key[0]}s posted to rank {key[1]} but {len(dones)} "
                             "completed (was a traced call still running?)")
        previous_end = None
        for p, d in zip(posts, dones):
            if (p.seq, p.bytes) != (d.seq, d.bytes):
                raise ValueError(f"rank {rank}: {key[0]} completions out of order on the link to rank {key[1]}")
            start = p.ns if previous_end is None else max(p.ns, previous_end)
            out.append(_span(rank, key[0], p, start, d.ns))
            previous_end = d.ns
    out.sort(key=lambda s: (s.start_ns, s.end_ns))
    return out


def _span(rank: int, kind: str, e, start_ns: int, end_ns: int) -> Span:
    return Span(rank, kind, start_ns, end_ns, e)
