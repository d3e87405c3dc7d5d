"""The flight recorder's verdict (pycollect.flight) on records made by hand, and
`pycollect flight DIR`. The records the engine writes are checked in test_deadlines.py."""
import json
import os

import pytest

from pycollect import flight
from pycollect.cli import main


def _entry(seq, state, op="all_reduce", phase="", step=0, steps=0, waiting_on=-1, ended_us=0, peer=-1,
           send=False):
    return {"id": seq, "seq": seq, "op": op, "dtype": "float32", "algo": "ring", "root": -1, "count": 1024,
            "peer": peer, "send": send, "state": state, "phase": phase, "step": step, "steps": steps,
            "waiting_on": waiting_on, "issued_us": 1, "started_us": 2 if state != "queued" else 0,
            "ended_us": ended_us}


def _record(rank, size, entries, error="CollectiveTimeoutError"):
    return {"version": 1, "group": "g3@0", "rank": rank, "size": size, "ranks": list(range(size)), "pid": 1,
            "host": "h", "written_us": 5, "error_kind": error, "error": f"rank {rank} failed", "entries": entries}


def test_a_rank_that_never_started_the_call_is_the_culprit():
    waiting = [_entry(416, "done"), _entry(417, "done"),
               _entry(418, "failed", phase="reduce-scatter", step=2, steps=3, waiting_on=2, ended_us=9)]
    ranks = {0: _record(0, 3, waiting), 1: _record(1, 3, waiting),
             2: _record(2, 3, [_entry(416, "done"), _entry(417, "done")], error="PeerLostError")}
    lines, culprits = flight.verdict(ranks)
    assert culprits == [2]
    assert lines[0] == "all_reduce #418 (float32 x 1024, ring):"
    assert "  rank 2 never started it (its last call: all_reduce #417, done)" in lines
    assert "  ranks 0, 1 waited in reduce-scatter step 3/3 for rank 2 (then failed)" in lines


def test_a_rank_without_a_record_is_the_culprit():
    stuck = [_entry(7, "failed", phase="all-gather", step=0, steps=1, waiting_on=1, ended_us=9)]
    lines, culprits = flight.verdict({0: _record(0, 2, stuck)})
    assert culprits == [1]
    assert any("rank 1 wrote no record" in line for line in lines)


def _at(seq, seconds, on):
    return [_entry(seq, "failed", phase="reduce-scatter", steps=2, waiting_on=on, ended_us=int(seconds * 1e6))]


def test_the_rank_a_timed_out_rank_waited_for_is_the_culprit():
    """A ring of 3: everyone started the call; rank 0 timed out waiting for rank 1, the
    others only saw links close (each waiting on its own neighbour)."""
    lines, culprits = flight.verdict({0: _record(0, 3, _at(5, 3.0, 1)),
                                      1: _record(1, 3, _at(5, 3.5, 2), error="PeerLostError"),
                                      2: _record(2, 3, _at(5, 3.1, 0), error="PeerLostError")})
    assert culprits == [1], lines


def test_a_late_start_is_shown():
    early = [_entry(4, "failed", phase="header exchange", steps=1, waiting_on=2, ended_us=3_000_002)]
    late = [dict(_entry(4, "failed", phase="reduce-scatter", steps=2, waiting_on=1, ended_us=9_000_000),
                 started_us=7_500_000)]
    lines, culprits = flight.verdict({0: _record(0, 3, early), 1: _record(1, 3, early),
                                      2: _record(2, 3, late, error="PeerLostError")})
    assert culprits == [2] and "  rank 2 started it 7.5 s after the first rank did" in lines, lines


def test_without_a_timeout_the_rank_that_failed_long_after_the_others_was_stalled():
    """Nobody timed out (the others failed on a lost link at 3 s); rank 1 failed at 20 s."""
    lost = "PeerLostError"
    lines, culprits = flight.verdict({0: _record(0, 3, _at(5, 3.0, 2), error=lost),
                                      1: _record(1, 3, _at(5, 20.0, 0), error=lost),
                                      2: _record(2, 3, _at(5, 3.1, 1), error=lost)})
    assert culprits == [1], lines


def test_a_rank_ahead_is_shown_where_it_waits():
    ahead = [_entry(8, "done"), _entry(9, "failed", phase="header exchange", steps=1, waiting_on=2)]
    behind = [_entry(8, "failed", phase="all-gather", step=1, steps=2, waiting_on=2)]
    lines, culprits = flight.verdict({0: _record(0, 3, ahead), 1: _record(1, 3, behind)})
    assert lines[0].startswith("all_reduce #8 ") and culprits == [2], lines
    assert "  rank 0 finished it; then all_reduce #9 failed in header exchange step 1/1 for rank 2" in lines


def test_pending_messages_are_listed():
    entries = [_entry(0, "done"), _entry(3, "running", op="send/recv", peer=1, waiting_on=1)]
    lines, _ = flight.verdict({0: _record(0, 2, entries)})
    assert "  rank 0: recv from rank 1 #3 (tag -1) running" in lines


def test_cli_reads_a_directory(tmp_path, capsys):
    stuck = [_entry(7, "failed", phase="all-gather", steps=1, waiting_on=1, ended_us=9)]
    (tmp_path / "g3@0-rank0.json").write_text(json.dumps(_record(0, 2, stuck)))
    assert main(["flight", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "group g3@0, all_reduce #7" in out and "culprit: rank 1" in out and "rank 0 raised" in out


def test_cli_refuses_what_is_not_a_record(tmp_path, capsys):
    assert main(["flight", str(tmp_path)]) == 2
    assert "no flight records" in capsys.readouterr().err
    (tmp_path / "g0@0-rank0.json").write_text("{not json")
    assert main(["flight", str(tmp_path)]) == 2
    assert "is not a pycollect flight record" in capsys.readouterr().err
    assert main(["flight", str(tmp_path / "missing")]) == 2
    with pytest.raises(ValueError, match="not a directory"):
        flight.load(str(tmp_path / "missing"))


def case_flight_directory():
    """Where this rank's temporary files and a group's flight records go by default."""
    import tempfile

    from pycollect.flight import directory

    return tempfile.gettempdir(), directory(None, "g")


def test_flight_records_stay_in_the_sessions_temporary_directory(pool3):
    """A provoked failure's flight record goes under the session's own temporary directory,
    in the ranks too (conftest.py), which the session removes: /tmp is left as found."""
    import conftest

    assert conftest.SESSION_TMP != conftest.SYSTEM_TMP and os.path.isdir(conftest.SESSION_TMP)
    for tmp, flights in pool3.run(case_flight_directory):
        assert os.path.commonpath([tmp, conftest.SYSTEM_TMP]) == conftest.SYSTEM_TMP
        assert tmp.startswith(os.environ["TMPDIR"]) and flights.startswith(tmp), (tmp, flights)
