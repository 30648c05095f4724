"""The UI's pure helpers: a mapped task's summary state, and the graph's layered layout."""

from __future__ import annotations

from tailrace.api._views import _layout, summary_state
from tailrace.serialization import SerializedTask


def _task(task_id: str, *upstream: str) -> SerializedTask:
    return SerializedTask(task_id=task_id, operator="EmptyOperator", upstream=list(upstream))


def test_a_mapped_task_shows_the_state_that_most_needs_attention() -> None:
    assert summary_state({"success": 812, "running": 40, "queued": 148}) == "running"
    assert summary_state({"success": 9, "failed": 1, "running": 3}) == "failed"
    assert summary_state({"success": 3, "none": 2}) is None  # not all scheduled yet
    assert summary_state({"success": 3, "skipped": 2}) == "success"
    assert summary_state({"skipped": 2}) == "skipped"
    assert summary_state({}) is None


def test_layers_follow_the_longest_path_and_rows_follow_upstreams() -> None:
    # start -> (a, b) -> join; b -> late -> end; a task with no upstream is a root.
    tasks = [
        _task("start"),
        _task("lonely"),
        _task("b", "start"),
        _task("a", "start"),
        _task("late", "b"),
        _task("join", "a", "b"),
        _task("end", "late", "join"),
    ]
    placed = _layout(tasks)
    layers = {t: layer for t, (layer, _) in placed.items()}
    assert layers == {
        "start": 0, "lonely": 0, "a": 1, "b": 1, "late": 2, "join": 2, "end": 3
    }  # fmt: skip
    # Inside a layer no two tasks share a row.
    rows = [(layer, row) for layer, row in placed.values()]
    assert len(rows) == len(set(rows))
