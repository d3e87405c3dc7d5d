"""Traces of the engine at work: what each rank posted, sent, received and reduced, when.

    spans = to_spans(events)                   # engine events (pc.take_trace) -> link and reduce spans
    write_chrome(spans, "trace.json")          # Chrome / Perfetto: a process per rank, a track per link
    write_timeline(spans, "trace.png", title)  # matplotlib: ranks as rows, phases coloured
    result = run_trace("all_reduce", 4 << 20, 4, algo="ring")   # run an op on local ranks, traced

Recording happens in the engine (csrc/trace/); turning it on is pc.tracing() or
PYCOLLECT_TRACE=1; docs/traces.md explains the tracks.
"""
from .chrome import write_chrome
from .job import TraceRun, run_trace
from .spans import Span, to_spans
from .timeline import write_timeline

__all__ = ["Span", "TraceRun", "run_trace", "to_spans", "write_chrome", "write_timeline"]
