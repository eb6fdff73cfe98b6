"""A job's tail: the end of its compiles with a job slot idle, from its trace."""

from __future__ import annotations

from typing import Any

import pytest

from wheelkiln.plan.timeline import compile_tail


def trace(*spans: tuple[str, float, float]) -> dict[str, Any]:
    """A trace with one TU event per (name, start s, end s), offset from an epoch."""
    epoch = 1_796_000_000.0
    return {
        "traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0}]
        + [
            {
                "ph": "X",
                "name": name,
                "cat": "compile",
                "ts": round((epoch + start) * 1e6),
                "dur": round((end - start) * 1e6),
            }
            for name, start, end in spans
        ],
        "otherData": {},
    }


def test_two_slots_ending_on_one_long_tu() -> None:
    # Both slots busy until 5 s (a slot handed from b to c at 2 s stays busy), then d
    # alone for 5 s: the shape of a shard whose last TU is a long one.
    tail = compile_tail(trace(("a", 0, 4), ("b", 0, 2), ("c", 2, 5), ("d", 4, 10)))
    assert tail is not None
    assert (tail.slots, tail.tus) == (2, ("d",))
    assert tail.compile_seconds == pytest.approx(10)
    assert tail.seconds == pytest.approx(5)
    assert tail.idle_slot_seconds == pytest.approx(5)
    assert tail.as_dict()["tail_tus"] == ["d"]


def test_three_slots_counting_each_idle_slot() -> None:
    # Three busy until 3 s; then two (one idle) until 6 s; then one (two idle) until 8 s.
    tail = compile_tail(trace(("a", 0, 6), ("b", 0, 3), ("c", 0, 8)))
    assert tail is not None
    assert (tail.slots, tail.tus) == (3, ("c", "a"))
    assert tail.seconds == pytest.approx(5)
    assert tail.idle_slot_seconds == pytest.approx(1 * 3 + 2 * 2)


def test_a_job_that_ends_with_every_slot_busy_has_no_tail() -> None:
    tail = compile_tail(trace(("a", 0, 3), ("b", 1, 3)))
    assert tail is not None
    assert (tail.seconds, tail.idle_slot_seconds, tail.tus) == (0, 0, ())


def test_a_trace_without_tus_has_none() -> None:
    assert compile_tail(trace()) is None
